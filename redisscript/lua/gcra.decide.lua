-- GCRA (internal/algo/gcra.go). State: {tat, frac[, stamp]}: TAT +
-- frac/r µs, and the stamp of the call that wrote it, if it may be undone.
local tat, frac = at, 0
if s ~= nil then tat, frac = s[1], s[2] end
local backlog, over = 0, false
if tat > at or (tat == at and frac > 0) then
  local dt = tat - at
  if dt > fdiv(capU, r) then over = true else backlog = dt * r + frac end
end
next = {tat, frac}
if force then
  -- A charge: the backlog grows up to two capacities (a debt), unless the
  -- TAT is deeper already (a clock far behind).
  allowed = true
  local dt = tat - at
  if dt <= fdiv(2 * capU, r) then
    local b = 0
    if dt >= 0 then b = dt * r + frac end
    b = math.min(b + math.min(cost, 2 * cap) * w, 2 * capU)
    next = {at + fdiv(b, r), math.fmod(b, r)}
    if stamp ~= 0 then next[3] = stamp end
    backlog, over = b, b > capU
  end
elseif cost > cap then
  wait = NEVER
else
  local c = cost * w
  if not over and c <= capU - backlog then
    allowed, backlog = true, backlog + c
    next = {at + fdiv(backlog, r), math.fmod(backlog, r)}
    if stamp ~= 0 then next[3] = stamp end
  else
    wait = tat + scdiv(frac + c - capU, r) - at
  end
end
if not over then remaining = fdiv(capU - math.min(backlog, capU), w) end
expire = next[1]
if next[2] > 0 then expire = expire + 1 end
if expire > at then reset = expire - at end
