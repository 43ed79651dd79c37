-- Undo only into the state the spend wrote (see tokenbucket.undo.lua).
next = s
if stamp ~= 0 and s[3] == stamp then
  local tat, frac = s[1], s[2] - cost * w
  if frac < 0 then
    local k = cdiv(-frac, r)
    tat, frac = tat - k, frac + k * r
  end
  next = {tat, frac}
end
expire = next[1]
if next[2] > 0 then expire = next[1] + 1 end
