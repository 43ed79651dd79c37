-- Concurrency (internal/algo/concurrency.go). State: {total, ticket1,
-- until1, cost1, ...}, by until, earliest first. Tickets are strings.
local st = s or {0}
local n = (#st - 1) / 3
local first, total = 1, st[1]
while first <= n and st[3 * first] <= at do
  total, first = total - st[3 * first + 1], first + 1
end
if cost > quota then
  wait = NEVER
elseif total + cost <= quota then
  allowed, total = true, total + cost
else
  local need = total + cost - quota
  for j = first, n do
    need = need - st[3 * j + 1]
    if need <= 0 then
      wait = st[3 * j] - at
      break
    end
  end
end
local untl = at + window
local last = nil
if first <= n then last = st[3 * n] end
if allowed and (last == nil or untl > last) then last = untl end
if last ~= nil and last > at then reset = last - at end
remaining = quota - total
-- Keep the live holders, the new one in order of expiry.
next = {total}
local placed = not allowed
for j = first, n do
  if not placed and st[3 * j] > untl then
    next[#next + 1], next[#next + 2], next[#next + 3] = ticket, untl, cost
    placed = true
  end
  next[#next + 1], next[#next + 2], next[#next + 3] = st[3 * j - 1], st[3 * j], st[3 * j + 1]
end
if not placed then next[#next + 1], next[#next + 2], next[#next + 3] = ticket, untl, cost end
if #next >= 4 then expire = next[#next - 1] end
