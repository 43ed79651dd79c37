local ws = sfdiv(uat, window) * window
next = {s[1], s[2], s[3]}
if ws == s[1] then
  next[3] = math.max(0, s[3] - cost)
elseif ws + window == s[1] then
  next[2] = math.max(0, s[2] - cost)
end
expire = next[1]
if next[3] > 0 then expire = next[1] + 2 * window elseif next[2] > 0 then expire = next[1] + window end
