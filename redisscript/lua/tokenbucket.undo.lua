-- Undo only into the state the spend wrote (its stamp): once another call
-- wrote the key — refilling the bucket, perhaps to its cap — or the key
-- expired and came back, part of the spend may be gone already, and giving
-- it back could admit more than the limit. It is left spent instead.
next = s
if stamp ~= 0 and s[3] == stamp then next = {math.min(capU, s[1] + cost * w), s[2]} end
expire = next[2] + cdiv(capU - next[1], r)
