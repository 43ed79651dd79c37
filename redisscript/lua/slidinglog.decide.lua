-- Sliding log (internal/algo/slidinglog.go). State: {total, at1, cost1,
-- at2, cost2, ...}, oldest first, one entry per instant.
local st = s or {0}
local n = (#st - 1) / 2
if n > 0 and at < st[2 * n] then at, clamped = st[2 * n], true end
-- Entries at or before at − W have left the window.
local first, total = 1, st[1]
while first <= n and st[2 * first] <= at - window do
  total, first = total - st[2 * first + 1], first + 1
end
if cost > quota then
  wait = NEVER
elseif total + cost <= quota then
  allowed, total = true, total + cost
else
  local need = total + cost - quota
  for j = first, n do
    need = need - st[2 * j + 1]
    if need <= 0 then
      wait = st[2 * j] + window - at
      break
    end
  end
end
if allowed then reset = window elseif first <= n then reset = st[2 * n] + window - at end
remaining = quota - total
next = {total}
for j = first, n do next[#next + 1], next[#next + 2] = st[2 * j], st[2 * j + 1] end
if allowed then
  if #next > 1 and next[#next - 1] == at then
    next[#next] = next[#next] + cost
  else
    next[#next + 1], next[#next + 2] = at, cost
  end
end
if #next >= 3 then expire = next[#next - 1] + window end
