next = {s[1]}
for j = 2, #s, 3 do
  if s[j] == ticket then
    next[1] = next[1] - s[j + 2]
  else
    next[#next + 1], next[#next + 2], next[#next + 3] = s[j], s[j + 1], s[j + 2]
  end
end
if #next >= 4 then expire = next[#next - 1] end
