-- Leaky bucket (internal/algo/leakybucket.go). State: {level, last[,
-- stamp]} (the stamp: see tokenbucket.decide.lua).
local level, last = 0, now
if s ~= nil then level, last = s[1], s[2] end
if at < last then at, clamped = last, true end
-- What has drained since last: the refill of the free space.
local free, e = capU - level, at - last
if e >= fills then
  free = capU
else
  local a = e * r
  if a < capU - free then free = free + a else free = capU end
end
local ahead = capU - free
level = ahead
if cost > cap then
  wait = NEVER
else
  local c = cost * w
  if ahead + c <= capU then
    allowed, level = true, level + c
    if ahead > delayU then wait = cdiv(ahead - delayU, r) end
  else
    wait = cdiv(ahead + c - capU, r)
  end
end
remaining, reset = fdiv(capU - level, w), cdiv(level, r)
next, expire = {level, at}, at + reset
if stamp ~= 0 then next[3] = stamp end
