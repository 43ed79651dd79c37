next = {math.min(capU, s[1] + cost * w), s[2]}
expire = s[2] + cdiv(capU - next[1], r)
