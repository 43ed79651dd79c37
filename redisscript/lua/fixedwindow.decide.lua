-- Fixed window (internal/algo/fixedwindow.go). State: {start, count}.
local start, count = sfdiv(at, window) * window, 0
if s ~= nil then start, count = s[1], s[2] end
if at < start then at, clamped = start, true end
local ws = sfdiv(at, window) * window
if ws > start then start, count = ws, 0 end
if force then
  -- A charge: the count may reach 2 × quota (a debt until the window ends).
  allowed, count = true, math.min(count + math.min(cost, 2 * quota), 2 * quota)
elseif cost > quota then
  wait = NEVER
elseif count + cost <= quota then
  allowed, count = true, count + cost
else
  wait = start + window - at
end
remaining = math.max(quota - count, 0)
next, expire = {start, count}, start
if count > 0 then reset, expire = start + window - at, start + window end
