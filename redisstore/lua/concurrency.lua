-- Concurrency (internal/algo/concurrency.go). State: {total, ticket1,
-- until1, cost1, ...}, by until, earliest first. Tickets are strings.
algorithms[6] = {
  fresh = function(p, now) return {0} end,
  decide = function(p, s, now, cost)
    local n = (#s - 1) / 3
    local first, total = 1, s[1]
    while first <= n and s[3 * first] <= now do
      total = total - s[3 * first + 1]
      first = first + 1
    end
    local allowed, wait = false, 0
    if cost > p.quota then
      wait = NEVER
    elseif total + cost <= p.quota then
      allowed, total = true, total + cost
    else
      local need = total + cost - p.quota
      for i = first, n do
        need = need - s[3 * i + 1]
        if need <= 0 then
          wait = s[3 * i] - now
          break
        end
      end
    end
    local untl = now + p.window
    local last = nil
    if first <= n then last = s[3 * n] end
    if allowed and (last == nil or untl > last) then last = untl end
    local reset = 0
    if last ~= nil and last > now then reset = last - now end
    -- Keep the live holders, inserting the new one in order of expiry.
    local next = {total}
    local placed = not allowed
    for i = first, n do
      if not placed and s[3 * i] > untl then
        next[#next + 1], next[#next + 2], next[#next + 3] = p.ticket, untl, cost
        placed = true
      end
      next[#next + 1], next[#next + 2], next[#next + 3] = s[3 * i - 1], s[3 * i], s[3 * i + 1]
    end
    if not placed then next[#next + 1], next[#next + 2], next[#next + 3] = p.ticket, untl, cost end
    return allowed, false, p.quota - total, wait, reset, next, now
  end,
  -- undo and release both drop the holder of p.ticket.
  undo = function(p, s)
    local next = {s[1]}
    for i = 2, #s, 3 do
      if s[i] == p.ticket then
        next[1] = next[1] - s[i + 2]
      else
        next[#next + 1], next[#next + 2], next[#next + 3] = s[i], s[i + 1], s[i + 2]
      end
    end
    return next
  end,
  reset_at = function(p, s)
    if #s < 4 then return nil end
    return s[#s - 1]
  end,
}
