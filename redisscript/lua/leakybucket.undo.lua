-- Undo only into the state the spend wrote (see tokenbucket.undo.lua).
next = s
if stamp ~= 0 and s[3] == stamp then next = {math.max(0, s[1] - cost * w), s[2]} end
expire = next[2] + cdiv(next[1], r)
