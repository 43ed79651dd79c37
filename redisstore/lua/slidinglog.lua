-- Sliding log (internal/algo/slidinglog.go). State: {total, at1, cost1,
-- at2, cost2, ...}, oldest first, one entry per instant.
algorithms[3] = {
  fresh = function(p, now) return {0} end,
  decide = function(p, s, now, cost)
    local n = (#s - 1) / 2
    local clamped = false
    if n > 0 and now < s[2 * n] then now, clamped = s[2 * n], true end
    -- Entries at or before now - W have left the window.
    local first, total = 1, s[1]
    while first <= n and s[2 * first] <= now - p.window do
      total = total - s[2 * first + 1]
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
        need = need - s[2 * i + 1]
        if need <= 0 then
          wait = s[2 * i] + p.window - now
          break
        end
      end
    end
    local reset = 0
    if allowed then
      reset = p.window
    elseif first <= n then
      reset = s[2 * n] + p.window - now
    end
    local next = {total}
    for i = first, n do
      next[#next + 1], next[#next + 2] = s[2 * i], s[2 * i + 1]
    end
    if allowed then
      if #next > 1 and next[#next - 1] == now then
        next[#next] = next[#next] + cost
      else
        next[#next + 1], next[#next + 2] = now, cost
      end
    end
    return allowed, clamped, p.quota - total, wait, reset, next, now
  end,
  undo = function(p, s)
    local next = {s[1]}
    for i = 2, #s, 2 do
      local c = s[i + 1]
      if s[i] == p.at and c > 0 then
        local take = math.min(c, p.cost)
        next[1], c = next[1] - take, c - take
      end
      if c > 0 then next[#next + 1], next[#next + 2] = s[i], c end
    end
    return next
  end,
  reset_at = function(p, s)
    if #s < 3 then return nil end
    return s[#s - 1] + p.window
  end,
}
