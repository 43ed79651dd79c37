-- Leaky bucket (internal/algo/leakybucket.go). State: {level, last}.
algorithms[5] = {
  fresh = function(p, now) return {0, now} end,
  decide = function(p, s, now, cost)
    local clamped = false
    if now < s[2] then now, clamped = s[2], true end
    local ahead = p.capU - refill(p, p.capU - s[1], p.capU, now - s[2])
    local level, allowed, wait = ahead, false, 0
    if cost > p.cap then
      wait = NEVER
    else
      local c = cost * p.w
      if ahead + c <= p.capU then
        allowed, level = true, level + c
        if ahead > p.delayU then wait = cdiv(ahead - p.delayU, p.r) end
      else
        wait = cdiv(ahead + c - p.capU, p.r)
      end
    end
    return allowed, clamped, fdiv(p.capU - level, p.w), wait, cdiv(level, p.r), {level, now}, now
  end,
  undo = function(p, s) return {math.max(0, s[1] - p.cost * p.w), s[2]} end,
  reset_at = function(p, s) return s[2] + cdiv(s[1], p.r) end,
}
