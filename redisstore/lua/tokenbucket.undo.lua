-- Undo only a spend nobody wrote after: once another call refilled the
-- bucket, part of the spend may have been refilled away (the cap), and
-- giving it back could admit more than the limit. Left spent instead.
if s[3] == uv then
  next = {math.min(capU, s[1] + cost * w), s[2], uv + 1}
else
  next = s
end
expire = next[2] + cdiv(capU - next[1], r)
