-- KEYS: one state key per limit of the call.
-- ARGV: protocol, now (µs; "" for Redis TIME), op ("d" decide, "r" release,
-- "u" undo), mode ("0" all or nothing, "1" rejections count), then
-- NPARAMS parameters per key (see params).
-- Reply: protocol, now, then per key: flags (1 allowed, 2 clamped, 4 not
-- spent: a state reported as it is),
-- remaining (atoms), wait (µs; -1 never), reset (µs), the instant decided.
if ARGV[1] ~= PROTOCOL then
  return redis.error_reply("sluice: script protocol " .. PROTOCOL .. ", client protocol " .. tostring(ARGV[1]))
end
if #ARGV ~= 4 + NPARAMS * #KEYS then
  return redis.error_reply("sluice: " .. #ARGV .. " arguments for " .. #KEYS .. " keys")
end
local now = tonumber(ARGV[2])
if now == nil then
  local t = redis.call("TIME")
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local grace = 1 -- ms kept past a state's reset
if ARGV[2] ~= "" then grace = 3600000 end -- a test clock may run ahead of Redis's

local function load(key)
  local raw = redis.call("GET", key)
  if not raw then return nil end
  return cmsgpack.unpack(raw)
end

-- store writes a state with the expiry of its reset, or deletes it when it
-- is fresh already: no key without a TTL.
local function store(p, key, s)
  local at = algorithms[p.alg].reset_at(p, s)
  if at == nil or at <= now then
    redis.call("DEL", key)
  else
    redis.call("SET", key, cmsgpack.pack(s), "PX", cdiv(at - now, 1000) + grace)
  end
end

local reply = {tonumber(PROTOCOL), now}
local function put(allowed, clamped, remaining, wait, reset, at, unspent)
  local flags = 0
  if allowed then flags = flags + 1 end
  if clamped then flags = flags + 2 end
  if unspent then flags = flags + 4 end
  reply[#reply + 1], reply[#reply + 2], reply[#reply + 3], reply[#reply + 4], reply[#reply + 5] = flags, remaining, wait, reset, at
end

local op, n = ARGV[3], #KEYS
local ps, states = {}, {}
for i = 1, n do
  ps[i] = params(i)
  if algorithms[ps[i].alg] == nil then
    return redis.error_reply("sluice: unknown algorithm " .. tostring(ps[i].alg))
  end
  states[i] = load(KEYS[i])
end

-- peek reports a state as it is, deciding a cost that never fits.
local function peek(i)
  local p, s = ps[i], states[i] or algorithms[ps[i].alg].fresh(ps[i], now)
  local _, clamped, remaining, _, reset, _, at = algorithms[p.alg].decide(p, s, now, p.cap + 1)
  return clamped, remaining, reset, at
end

if op == "d" then
  local outs, all = {}, true
  for i = 1, n do
    local p = ps[i]
    local alg = algorithms[p.alg]
    local s = states[i] or alg.fresh(p, now)
    outs[i] = {alg.decide(p, s, now, p.cost)}
    all = all and outs[i][1]
  end
  for i = 1, n do
    local p, o = ps[i], outs[i]
    if o[1] and (all or (ARGV[4] == "1" and p.alg ~= 6)) then
      store(p, KEYS[i], o[6])
      put(true, o[2], o[3], o[4], o[5], o[7])
    elseif o[1] then
      -- It would have fit, but the call was rejected: nothing is spent.
      local clamped, remaining, reset, at = peek(i)
      put(true, clamped, remaining, 0, reset, at, true)
    else
      put(false, o[2], o[3], o[4], o[5], o[7])
    end
  end
elseif op == "r" or op == "u" then
  -- Release a concurrency ticket, or undo a spend (the compensation of a
  -- call whose keys spanned hash slots), then report the state.
  for i = 1, n do
    local p, s = ps[i], states[i]
    if s ~= nil then
      states[i] = algorithms[p.alg].undo(p, s)
      store(p, KEYS[i], states[i])
    end
    local clamped, remaining, reset, at = peek(i)
    put(false, clamped, remaining, 0, reset, at, true)
  end
else
  return redis.error_reply("sluice: unknown op " .. tostring(op))
end
return reply
