-- sluice: decisions for redisstore, composed from prelude.lua, one file per
-- algorithm and main.lua. Mirrors internal/algo: every quantity is an
-- integer below 2^53, so doubles compute exactly what Go computes.

local PROTOCOL = "1"  -- bump with any change of ARGV, KEYS or reply layout
local NEVER = -1      -- the wait of a cost that can never fit

-- floor(a / b) for 0 <= a < 2^53, 0 < b < 2^53: exact (fmod is exact).
local function fdiv(a, b)
  return (a - math.fmod(a, b)) / b
end

-- ceil(a / b) for 0 <= a < 2^53, 0 < b.
local function cdiv(a, b)
  local q = fdiv(a, b)
  if q * b < a then q = q + 1 end
  return q
end

-- floor(a / b) and ceil(a / b) for any a, b > 0.
local function sfdiv(a, b)
  if a >= 0 then return fdiv(a, b) end
  return -cdiv(-a, b)
end
local function scdiv(a, b) return -sfdiv(-a, b) end

local function window_start(t, w) return sfdiv(t, w) * w end

-- Exact products of two integers below 2^53: five limbs of 2^26, little
-- endian. Used by the sliding window counter, whose comparisons are
-- 106-bit (Go: math/bits).
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
-- cmp returns -1, 0 or 1.
local function cmp(x, y)
  for i = 5, 1, -1 do
    if x[i] ~= y[i] then
      if x[i] < y[i] then return -1 end
      return 1
    end
  end
  return 0
end
-- floor(x / d) for a 106-bit x = a*b whose quotient is below 2^53, from a
-- floating estimate corrected with exact products.
local function muldiv(a, b, d)
  local x = mul(a, b)
  local q = math.floor(a / d * b)
  while q > 0 and cmp(mul(q, d), x) > 0 do q = q - 1 end
  while cmp(mul(q + 1, d), x) <= 0 do q = q + 1 end
  return q, cmp(mul(q, d), x) == 0
end

-- A limit's parameters, as Go's algo.Params compiles them.
local NPARAMS = 12
local function params(i)
  local b = 4 + (i - 1) * NPARAMS
  return {
    alg = tonumber(ARGV[b + 1]), capU = tonumber(ARGV[b + 2]), r = tonumber(ARGV[b + 3]),
    w = tonumber(ARGV[b + 4]), cap = tonumber(ARGV[b + 5]), quota = tonumber(ARGV[b + 6]),
    window = tonumber(ARGV[b + 7]), delayU = tonumber(ARGV[b + 8]), fills = tonumber(ARGV[b + 9]),
    cost = tonumber(ARGV[b + 10]), ticket = ARGV[b + 11], at = tonumber(ARGV[b + 12]),
  }
end

-- refill mirrors units.Rate.Refill.
local function refill(p, level, max, elapsed)
  if elapsed >= p.fills then return max end
  local add = elapsed * p.r
  if add < max - level then return level + add end
  return max
end

local algorithms = {}
