-- Exact products of two integers below 2^53, as five limbs of 2^26,
-- little endian: the sliding window counter's comparisons are 106-bit
-- (Go: math/bits).
local LIMB = 67108864 -- 2^26
local function split(a)
  local a0 = math.fmod(a, LIMB)
  local t = (a - a0) / LIMB
  local a1 = math.fmod(t, LIMB)
  return a0, a1, (t - a1) / LIMB
end
local function normalize(c)
  for i = 1, 4 do
    local carry = fdiv(c[i], LIMB)
    c[i] = c[i] - carry * LIMB
    c[i + 1] = c[i + 1] + carry
  end
  return c
end
local function mul(a, b)
  local a0, a1, a2 = split(a)
  local b0, b1, b2 = split(b)
  return normalize({a0 * b0, a0 * b1 + a1 * b0, a0 * b2 + a1 * b1 + a2 * b0, a1 * b2 + a2 * b1, a2 * b2})
end
local function add(x, y)
  return normalize({x[1] + y[1], x[2] + y[2], x[3] + y[3], x[4] + y[4], x[5] + y[5]})
end
local function cmp(x, y) -- -1, 0 or 1
  for i = 5, 1, -1 do
    if x[i] ~= y[i] then
      if x[i] < y[i] then return -1 end
      return 1
    end
  end
  return 0
end
-- floor(a*b / d) and whether it is exact, for a quotient below 2^53: a
-- floating estimate corrected with exact products.
local function muldiv(a, b, d)
  local x = mul(a, b)
  local q = math.floor(a / d * b)
  while q > 0 and cmp(mul(q, d), x) > 0 do q = q - 1 end
  while cmp(mul(q + 1, d), x) <= 0 do q = q + 1 end
  return q, cmp(mul(q, d), x) == 0
end
