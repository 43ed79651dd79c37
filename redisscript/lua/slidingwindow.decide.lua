-- Sliding window counter (internal/algo/slidingwindow.go). State:
-- {start, prev, cur}. Its comparisons are exact 106-bit products.
local start, prev, cur = sfdiv(at, window) * window, 0, 0
if s ~= nil then start, prev, cur = s[1], s[2], s[3] end
if at < start then at, clamped = start, true end
local ws = sfdiv(at, window) * window
if ws == start + window then
  start, prev, cur = ws, cur, 0
elseif ws ~= start then
  start, prev, cur = ws, 0, 0
end
local e = at - start
local weighted = mul(prev, window - e)
if force then
  -- A charge: the current count may reach 2 × quota (a debt).
  allowed, cur = true, math.min(cur + math.min(cost, 2 * quota), 2 * quota)
elseif cost > quota then
  wait = NEVER
elseif cmp(mul(quota, window), add(weighted, mul(cur + cost, window))) >= 0 then
  allowed, cur = true, cur + cost
else
  -- The first instant at which the cost fits: in this window, or the next.
  local retry = nil
  local room = quota - cur - cost
  if room >= 0 and prev > 0 then
    local f = muldiv(room, window, prev)
    if f > 0 then retry = start + window - f end
  end
  if retry == nil then
    retry = start + window
    if cur > 0 and quota - cost < cur then retry = retry + window - muldiv(quota - cost, window, cur) end
  end
  wait = retry - at
end
local room = quota - cur
if room > 0 and cmp(weighted, mul(room, window)) < 0 then
  local f, exact = muldiv(prev, window - e, window)
  if not exact then f = f + 1 end
  remaining = room - f
end
next, expire = {start, prev, cur}, start
if cur > 0 then expire = start + 2 * window elseif prev > 0 then expire = start + window end
if expire > at then reset = expire - at end
