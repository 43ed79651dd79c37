-- Token bucket (internal/algo/tokenbucket.go). State: {tokens, last[,
-- stamp]}: the stamp of the call that wrote it, if it may be undone.
local tokens, last = capU, now
if s ~= nil then tokens, last = s[1], s[2] end
if at < last then at, clamped = last, true end
local e = at - last
if e >= fills then
  tokens = capU
else
  local a = e * r
  if a < capU - tokens then tokens = tokens + a else tokens = capU end
end
if cost > cap then
  wait = NEVER
else
  local c = cost * w
  if c <= tokens then allowed, tokens = true, tokens - c else wait = cdiv(c - tokens, r) end
end
remaining, reset = fdiv(tokens, w), cdiv(capU - tokens, r)
next, expire = {tokens, at}, at + reset
if stamp ~= 0 then next[3] = stamp end
