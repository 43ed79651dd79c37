-- Undo only a spend nobody wrote after (see tokenbucket.undo.lua).
next = s
if s[3] == uv then
  local tat, frac = s[1], s[2] - cost * w
  if frac < 0 then
    local k = cdiv(-frac, r)
    tat, frac = tat - k, frac + k * r
  end
  next = {tat, frac, uv + 1}
end
expire = next[1]
if next[2] > 0 then expire = next[1] + 1 end
