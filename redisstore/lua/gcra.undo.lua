local tat, frac = s[1], s[2] - cost * w
if frac < 0 then
  local k = cdiv(-frac, r)
  tat, frac = tat - k, frac + k * r
end
next, expire = {tat, frac}, tat
if frac > 0 then expire = tat + 1 end
