-- Token bucket (internal/algo/tokenbucket.go). State: {tokens, last[,
-- stamp]}: the stamp of the call that wrote it, if it may be undone.
-- Tokens below 0 are the debt of a charge (force), at most −capU.
local tokens, last = capU, now
if s ~= nil then tokens, last = s[1], s[2] end
if at < last then at, clamped = last, true end
local e = at - last
local refill = true
if tokens < 0 then
  -- Pay the debt first, on its own (units.Rate.Refill): no product above 2^53.
  local debt = cdiv(-tokens, r)
  if e < debt then
    tokens, refill = tokens + e * r, false
  else
    tokens, e = tokens + debt * r, e - debt
  end
end
if refill then
  if e >= fills then
    tokens = capU
  else
    local a = e * r
    if a < capU - tokens then tokens = tokens + a else tokens = capU end
  end
end
if force then
  allowed, tokens = true, math.max(tokens - math.min(cost, 2 * cap) * w, -capU)
elseif cost > cap then
  wait = NEVER
else
  local c = cost * w
  if c <= tokens then allowed, tokens = true, tokens - c else wait = cdiv(c - tokens, r) end
end
remaining, reset = fdiv(math.max(tokens, 0), w), cdiv(capU - tokens, r)
next, expire = {tokens, at}, at + reset
if stamp ~= 0 then next[3] = stamp end
