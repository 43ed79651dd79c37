-- Sliding window counter (internal/algo/slidingwindow.go). State:
-- {start, prev, cur}. Its comparisons are exact 106-bit products.
local function sw_reset_at(p, s)
  if s[3] > 0 then return s[1] + 2 * p.window end
  if s[2] > 0 then return s[1] + p.window end
  return s[1]
end
local function sw_retry_at(s, q, w, cost)
  local start, prev, cur = s[1], s[2], s[3]
  local room = q - cur - cost
  if room >= 0 and prev > 0 then
    local f = muldiv(room, w, prev)
    if f > 0 then return start + w - f end
  end
  local nxt = start + w
  if cur == 0 or q - cost >= cur then return nxt end
  return nxt + w - muldiv(q - cost, w, cur)
end
algorithms[4] = {
  fresh = function(p, now) return {window_start(now, p.window), 0, 0} end,
  decide = function(p, s, now, cost)
    local clamped = false
    if now < s[1] then now, clamped = s[1], true end
    local w, q = p.window, p.quota
    local start, prev, cur = s[1], s[2], s[3]
    local ws = window_start(now, w)
    if ws == start + w then
      start, prev, cur = ws, cur, 0
    elseif ws ~= start then
      start, prev, cur = ws, 0, 0
    end
    local e = now - start
    local weighted = mul(prev, w - e)
    local allowed, wait = false, 0
    if cost > q then
      wait = NEVER
    elseif cmp(mul(q, w), add(weighted, mul(cur + cost, w))) >= 0 then
      allowed, cur = true, cur + cost
    else
      wait = sw_retry_at({start, prev, cur}, q, w, cost) - now
    end
    local remaining = 0
    local room = q - cur
    if room > 0 and cmp(weighted, mul(room, w)) < 0 then
      local f, exact = muldiv(prev, w - e, w)
      if not exact then f = f + 1 end
      remaining = room - f
    end
    local next = {start, prev, cur}
    local reset, at = 0, sw_reset_at(p, next)
    if at > now then reset = at - now end
    return allowed, clamped, remaining, wait, reset, next, now
  end,
  undo = function(p, s)
    local ws = window_start(p.at, p.window)
    if ws == s[1] then return {s[1], s[2], math.max(0, s[3] - p.cost)} end
    if ws + p.window == s[1] then return {s[1], math.max(0, s[2] - p.cost), s[3]} end
    return s
  end,
  reset_at = sw_reset_at,
}
