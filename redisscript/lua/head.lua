-- sluice: decisions for redisscript. Go composes this script from head.lua,
-- [bigint.lua,] each algorithm's decide and undo fragments spliced into
-- main.lua. It mirrors internal/algo: every quantity is an integer below
-- 2^53, so doubles compute exactly what Go computes.
--
-- KEYS: one state key per limit of the call.
-- ARGV: protocol, now (µs; "" for Redis TIME), op (one of OP_* below), mode
-- ("0" all or nothing, "1" rejections count), then 13
-- parameters per key: algorithm, capU, r, w, cap, quota, window, delayU,
-- fills, cost, ticket, the instant of the spend to undo, and a stamp: the
-- random mark a decision writes into a bucket's state (0: none; a call
-- that may be undone has one), which its undo must find there.
-- Reply: protocol, now, then per key: flags (ALLOWED, CLAMPED, UNSPENT
-- below, added), remaining (atoms), wait (µs; NEVER), reset (µs), the
-- instant decided.
-- A batch (OP_BATCH) decides its calls one after the other, each as
-- OP_DECIDE would, at one instant; its reply is theirs in order. Its ARGV:
-- protocol, now, op, the number of calls m, the number of distinct limits
-- n, then each limit's 9 fixed parameters (algorithm … fills), then m pairs
-- (the call's number of keys, its mode), then 5 parameters per key: its
-- limit (1 to n), cost, ticket, the instant to undo, stamp.
local PROTOCOL = "3"
-- The ops (ARGV[3]), as Go names them (call.go).
local OP_DECIDE = "d" -- decide the limits, spending what fits unless the call is rejected
local OP_CHARGE = "c" -- spend one key's cost whatever its state holds, into a debt
local OP_UNDO = "u"   -- give back a spend or a concurrency ticket, then report
local OP_PEEK = "p"   -- report the states as they are
local OP_RESET = "x"  -- forget the states, then report them (full)
local OP_BATCH = "b"  -- decide several calls, in order (coalesced decisions)
local op = ARGV[3]
-- The reply's flags, as Go names them (reply.go).
local ALLOWED = 1
local CLAMPED = 2 -- the clock was behind the state: no refill
local UNSPENT = 4 -- the state as it is: nothing spent
local FAILED = -1 -- a batch's call that failed in the script (its error caught): the others are decided
if ARGV[1] ~= PROTOCOL then
  return redis.error_reply("sluice: script protocol " .. PROTOCOL .. ", client protocol " .. tostring(ARGV[1]))
end
-- PBASE: the ARGV index before the first key's parameters; PKEY: how many
-- each key has. A batch's limits are in LIMITS, its calls from CBASE.
local PBASE, PKEY, LIMITS, CBASE = 4, 13, nil, 0
if op == OP_BATCH then
  local m, n = tonumber(ARGV[4]), tonumber(ARGV[5])
  if m == nil or m < 1 or m ~= math.floor(m) or n == nil or n < 1 or n ~= math.floor(n) or 5 + 9 * n + 2 * m > #ARGV then
    return redis.error_reply("sluice: batch of " .. tostring(ARGV[4]) .. " calls on " .. tostring(ARGV[5]) .. " limits")
  end
  LIMITS = {}
  for j = 1, n do
    local b = 5 + 9 * (j - 1)
    LIMITS[j] = {tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5]),
      tonumber(ARGV[b + 6]), tonumber(ARGV[b + 7]), tonumber(ARGV[b + 8]), tonumber(ARGV[b + 9])}
  end
  CBASE = 5 + 9 * n
  PBASE, PKEY = CBASE + 2 * m, 5
end
if #ARGV ~= PBASE + PKEY * #KEYS then
  return redis.error_reply("sluice: " .. #ARGV .. " arguments for " .. #KEYS .. " keys")
end
local now = tonumber(ARGV[2])
local grace = 1 -- ms a key outlives its state's reset
if now == nil then
  local t = redis.call("TIME")
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  grace = 3600000 -- a test clock may run ahead of Redis's
end
local NEVER = -1

-- floor(a / b) for 0 <= a < 2^53, 0 < b: exact (fmod is exact).
local function fdiv(a, b) return (a - math.fmod(a, b)) / b end
-- ceil(a / b) for 0 <= a < 2^53, 0 < b.
local function cdiv(a, b)
  local q = (a - math.fmod(a, b)) / b
  if q * b < a then q = q + 1 end
  return q
end
-- floor and ceil of a / b for any a, b > 0.
local function sfdiv(a, b)
  if a >= 0 then return fdiv(a, b) end
  return -cdiv(-a, b)
end
local function scdiv(a, b) return -sfdiv(-a, b) end
