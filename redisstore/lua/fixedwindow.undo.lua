next, expire = {s[1], math.max(0, s[2] - cost)}, s[1]
if next[2] > 0 then expire = s[1] + window end
