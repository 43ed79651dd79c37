-- sluice redisbucket: take a slice of tokens from one token bucket that a
-- fleet shares (take.go sends it). Every quantity is an integer below 2^53
-- (see internal/units), so Lua's doubles compute exactly what Go would.
--
-- KEYS[1]: the bucket, cmsgpack {level, last, w}: the level in scaled
--   units (w of them per atom, a millionth of a token), at last (µs of
--   Redis TIME). No key: a full bucket.
-- ARGV: protocol, r (scaled units refilled per µs), w (scaled units per
--   atom), cap (the burst in scaled units), want (atoms taken at most),
--   need (atoms taken at least: fewer are not taken at all).
-- Reply: granted atoms (0, or need ≤ granted ≤ want), the level left
--   (scaled units), and the lag (µs) from now until the level starts to
--   refill (0 unless Redis's clock is behind the state's): the client
--   works out when the bucket will hold what it wants next.
local PROTOCOL = "1"
if ARGV[1] ~= PROTOCOL then
  return redis.error_reply("sluice: bucket script protocol " .. PROTOCOL .. ", client protocol " .. tostring(ARGV[1]))
end
local r, w, cap = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local want, need = tonumber(ARGV[5]), tonumber(ARGV[6])
if not (r and w and cap and want and need) or r <= 0 or w <= 0 or need <= 0 or need > want or want * w > cap or cap > 4503599627370496 then
  return redis.error_reply("sluice: bad bucket arguments")
end

-- floor(a / b) and ceil(a / b) for 0 <= a < 2^53, 0 < b: exact.
local function fdiv(a, b) return (a - math.fmod(a, b)) / b end
local function cdiv(a, b)
  local q = fdiv(a, b)
  if q * b < a then q = q + 1 end
  return q
end

local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

-- Load, in this call's units: a bucket another configuration wrote (its
-- w differs: the limit changed) keeps its whole atoms, at most cap.
local level, last = cap, now
local raw = redis.call("GET", KEYS[1])
if raw then
  local s = cmsgpack.unpack(raw)
  level, last = s[1], s[2]
  if s[3] ~= w then level = math.min(fdiv(level, s[3]), fdiv(cap, w)) * w end
  if level > cap then level = cap end
end

-- Refill from last to now (a clock behind the state refills nothing
-- until it reaches the state's instant: the lag).
local lag = 0
if now > last then
  local missing = cap - level
  if now - last >= cdiv(missing, r) then
    level = cap
  else
    level = level + (now - last) * r -- < missing + r <= 2^53
  end
  last = now
else
  lag = last - now
end

-- Take between need and want atoms, or nothing.
local granted = 0
if level >= need * w then
  granted = math.min(want, fdiv(level, w))
  level = level - granted * w -- below cap: granted >= 1
  -- The key lives until the bucket is full again, when no key means the
  -- same.
  redis.call("SET", KEYS[1], cmsgpack.pack({level, last, w}), "PX", cdiv(lag + cdiv(cap - level, r), 1000) + 1)
end

return {granted, level, lag}
