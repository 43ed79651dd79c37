-- GCRA (internal/algo/gcra.go). State: {tat, frac}: TAT + frac/r µs.
local function gcra_reset_at(s)
  if s[2] > 0 then return s[1] + 1 end
  return s[1]
end
algorithms[1] = {
  fresh = function(p, now) return {now, 0} end,
  decide = function(p, s, now, cost)
    local r = p.r
    local backlog, over = 0, false
    if s[1] > now or (s[1] == now and s[2] > 0) then
      local dt = s[1] - now
      if dt > fdiv(p.capU, r) then over = true else backlog = dt * r + s[2] end
    end
    local allowed, wait, next = false, 0, s
    if cost > p.cap then
      wait = NEVER
    else
      local c = cost * p.w
      if not over and c <= p.capU - backlog then
        allowed = true
        backlog = backlog + c
        next = {now + fdiv(backlog, r), math.fmod(backlog, r)}
      else
        wait = s[1] + scdiv(s[2] + c - p.capU, r) - now
      end
    end
    local remaining = 0
    if not over then remaining = fdiv(p.capU - math.min(backlog, p.capU), p.w) end
    local reset, at = 0, gcra_reset_at(next)
    if at > now then reset = at - now end
    return allowed, false, remaining, wait, reset, next, now
  end,
  undo = function(p, s)
    local frac = s[2] - p.cost * p.w
    local tat = s[1]
    if frac < 0 then
      local k = cdiv(-frac, p.r)
      tat, frac = tat - k, frac + k * p.r
    end
    return {tat, frac}
  end,
  reset_at = function(p, s) return gcra_reset_at(s) end,
}
