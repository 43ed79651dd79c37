-- Undo the spend in the window it was made in, if that is still the
-- counted one.
next = s
if sfdiv(uat, window) * window == s[1] then next = {s[1], math.max(0, s[2] - cost)} end
expire = next[1]
if next[2] > 0 then expire = next[1] + window end
