-- Undo only a spend nobody wrote after (see tokenbucket.undo.lua).
next = s
if s[3] == uv then next = {math.max(0, s[1] - cost * w), s[2], uv + 1} end
expire = next[2] + cdiv(next[1], r)
