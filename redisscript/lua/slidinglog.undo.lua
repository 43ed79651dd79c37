next = {s[1]}
for j = 2, #s, 2 do
  local c = s[j + 1]
  if s[j] == uat and c > 0 then
    local take = math.min(c, cost)
    next[1], c = next[1] - take, c - take
  end
  if c > 0 then next[#next + 1], next[#next + 2] = s[j], c end
end
if #next >= 3 then expire = next[#next - 1] + window end
