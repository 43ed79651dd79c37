-- Fixed window (internal/algo/fixedwindow.go). State: {start, count}.
algorithms[2] = {
  fresh = function(p, now) return {window_start(now, p.window), 0} end,
  decide = function(p, s, now, cost)
    local clamped = false
    if now < s[1] then now, clamped = s[1], true end
    local start, count = s[1], s[2]
    local ws = window_start(now, p.window)
    if ws > start then start, count = ws, 0 end
    local allowed, wait = false, 0
    if cost > p.quota then
      wait = NEVER
    elseif count + cost <= p.quota then
      allowed, count = true, count + cost
    else
      wait = start + p.window - now
    end
    local reset = 0
    if count > 0 then reset = start + p.window - now end
    return allowed, clamped, p.quota - count, wait, reset, {start, count}, now
  end,
  undo = function(p, s) return {s[1], math.max(0, s[2] - p.cost)} end,
  reset_at = function(p, s)
    if s[2] == 0 then return s[1] end
    return s[1] + p.window
  end,
}
