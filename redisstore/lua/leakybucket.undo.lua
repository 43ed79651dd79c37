next = {math.max(0, s[1] - cost * w), s[2]}
expire = s[2] + cdiv(next[1], r)
