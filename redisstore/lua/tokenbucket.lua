-- Token bucket (internal/algo/tokenbucket.go). State: {tokens, last}.
algorithms[0] = {
  fresh = function(p, now) return {p.capU, now} end,
  decide = function(p, s, now, cost)
    local clamped = false
    if now < s[2] then now, clamped = s[2], true end
    local tokens = refill(p, s[1], p.capU, now - s[2])
    local allowed, wait = false, 0
    if cost > p.cap then
      wait = NEVER
    else
      local c = cost * p.w
      if c <= tokens then
        allowed, tokens = true, tokens - c
      else
        wait = cdiv(c - tokens, p.r)
      end
    end
    return allowed, clamped, fdiv(tokens, p.w), wait, cdiv(p.capU - tokens, p.r), {tokens, now}, now
  end,
  undo = function(p, s)
    return {math.min(p.capU, s[1] + p.cost * p.w), s[2]}
  end,
  reset_at = function(p, s) return s[2] + cdiv(p.capU - s[1], p.r) end,
}
