-- One limit, deciding or charging (OP_CHARGE: spend whatever the state
-- holds, into a debt; Go sends it only for the algorithms that carry one): the
-- usual call, spliced flat so that nothing but the algorithm runs (no
-- function is defined on this path).
local force = op == OP_CHARGE
if (op == OP_DECIDE or force) and #KEYS == 1 then
  local alg, capU, r, w, cap = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
  local quota, window, delayU, fills = tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12]), tonumber(ARGV[13])
  local cost, ticket = tonumber(ARGV[14]), ARGV[15]
  local s = nil
  local raw = redis.call("GET", KEYS[1])
  if raw then s = cmsgpack.unpack(raw) end
  local stamp = tonumber(ARGV[17])
  if force and alg ~= 0 and alg ~= 1 and alg ~= 2 and alg ~= 4 then
    return redis.error_reply("sluice: algorithm " .. alg .. " cannot be charged")
  end
  local allowed, clamped, remaining, wait, reset, next, at, expire = false, false, 0, 0, 0, nil, now, nil
  --@DECIDE@
  local flags = 0
  if clamped then flags = CLAMPED end
  if allowed then
    flags = flags + ALLOWED
    if expire == nil or expire <= now then
      redis.call("DEL", KEYS[1])
    else
      redis.call("SET", KEYS[1], cmsgpack.pack(next), "PX", cdiv(expire - now, 1000) + grace)
    end
  end
  return {tonumber(PROTOCOL), now, flags, remaining, wait, reset, at}
end

-- The 13 parameters of key i (see the header).
local function param(i)
  if LIMITS then
    local b = PBASE + (i - 1) * 5
    local l = LIMITS[tonumber(ARGV[b + 1])]
    if l == nil then
      error("sluice: key " .. i .. " names limit " .. tostring(ARGV[b + 1]) .. ", not one of the batch's")
    end
    return l[1], l[2], l[3], l[4], l[5], l[6], l[7], l[8], l[9],
      tonumber(ARGV[b + 2]), ARGV[b + 3], tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5])
  end
  local b = PBASE + (i - 1) * 13
  return tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4]),
    tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6]), tonumber(ARGV[b + 7]), tonumber(ARGV[b + 8]),
    tonumber(ARGV[b + 9]), tonumber(ARGV[b + 10]), ARGV[b + 11], tonumber(ARGV[b + 12]), tonumber(ARGV[b + 13])
end

-- decide runs key i's algorithm on state s (nil: a fresh key) without
-- writing anything; with peek, on a cost that never fits, which reads the
-- state as it is. A fragment computes: allowed, clamped, remaining, wait,
-- reset, next (the new state), at (the instant decided: now, or the
-- state's own instant when the clock is behind it), expire (the instant
-- from which next is fresh; nil: it is already).
local function decide(i, s, peek)
  local alg, capU, r, w, cap, quota, window, delayU, fills, cost, ticket, uat, stamp = param(i)
  if peek then cost = cap + 1 end
  local allowed, clamped, remaining, wait, reset, next, at, expire = false, false, 0, 0, 0, nil, now, nil
  --@DECIDE@
  return allowed, clamped, remaining, wait, reset, next, at, expire, alg
end

-- store writes a state with the expiry of its reset, or deletes it when it
-- is fresh already: no key ever without a TTL.
local function store(key, next, expire)
  if expire == nil or expire <= now then
    redis.call("DEL", key)
  else
    redis.call("SET", key, cmsgpack.pack(next), "PX", cdiv(expire - now, 1000) + grace)
  end
end

local function load(key)
  local raw = redis.call("GET", key)
  if raw then return cmsgpack.unpack(raw) end
  return nil
end

local reply = {tonumber(PROTOCOL), now}
local function put(flags, remaining, wait, reset, at)
  local k = #reply
  reply[k + 1], reply[k + 2], reply[k + 3], reply[k + 4], reply[k + 5] = flags, remaining, wait, reset, at
end

-- decideCall decides the call on keys first to last (all or nothing, or
-- rejections count with rc) and puts its parts in the reply.
local function decideCall(first, last, rc)
  local states, outs, all = {}, {}, true
  for i = first, last do
    states[i] = load(KEYS[i])
    local o = {decide(i, states[i], false)}
    outs[i], all = o, all and o[1]
  end
  for i = first, last do
    local o = outs[i]
    local clamped = 0
    if o[2] then clamped = CLAMPED end
    if o[1] and (all or (rc and o[9] ~= 6)) then
      store(KEYS[i], o[6], o[8])
      put(ALLOWED + clamped, o[3], o[4], o[5], o[7])
    elseif o[1] then
      -- It would have fit, but the call was rejected: nothing is spent.
      local _, pc, remaining, _, reset, _, at = decide(i, states[i], true)
      if pc then clamped = CLAMPED else clamped = 0 end
      put(ALLOWED + UNSPENT + clamped, remaining, 0, reset, at)
    else
      put(clamped, o[3], o[4], o[5], o[7])
    end
  end
end

local n = #KEYS
if op == OP_DECIDE then
  decideCall(1, n, ARGV[4] == "1")
elseif op == OP_BATCH then
  -- Check every call's size before deciding any: nothing is written for
  -- a batch that is refused.
  local m, nl, sum = tonumber(ARGV[4]), #LIMITS, 0
  for j = 1, m do
    local k = tonumber(ARGV[CBASE + 2 * j - 1])
    if k == nil or k < 1 or k ~= math.floor(k) then
      return redis.error_reply("sluice: batch call " .. j .. " of " .. tostring(ARGV[CBASE + 2 * j - 1]) .. " keys")
    end
    local mode = ARGV[CBASE + 2 * j]
    if mode ~= "0" and mode ~= "1" then
      return redis.error_reply("sluice: batch call " .. j .. " mode " .. tostring(mode))
    end
    sum = sum + k
  end
  for i = 1, n do
    local l = tonumber(ARGV[PBASE + (i - 1) * 5 + 1])
    if l == nil or l < 1 or l > nl or l ~= math.floor(l) then
      return redis.error_reply("sluice: batch key " .. i .. " names limit " .. tostring(ARGV[PBASE + (i - 1) * 5 + 1]) .. " of " .. nl)
    end
  end
  if sum ~= n then
    return redis.error_reply("sluice: batch calls of " .. sum .. " keys in all, " .. n .. " keys given")
  end
  -- decideOne decides a call of one limit (the usual one) as the flat
  -- path above does, without a table.
  local function decideOne(i)
    local allowed, clamped, remaining, wait, reset, next, at, expire = decide(i, load(KEYS[i]), false)
    local flags = 0
    if clamped then flags = CLAMPED end
    if allowed then
      flags = flags + ALLOWED
      store(KEYS[i], next, expire)
    end
    put(flags, remaining, wait, reset, at)
  end
  local first = 1
  for j = 1, m do
    local k = tonumber(ARGV[CBASE + 2 * j - 1])
    local mark, ok = #reply, nil
    if k == 1 then
      ok = pcall(decideOne, first)
    else
      ok = pcall(decideCall, first, first + k - 1, ARGV[CBASE + 2 * j] == "1")
    end
    if not ok then
      -- This call failed (a key holding another type, a state it cannot
      -- read; its decisions come before its writes): its parts say
      -- FAILED, and the others go on.
      for x = #reply, mark + 1, -1 do reply[x] = nil end
      for _ = 1, k do put(FAILED, 0, 0, 0, 0) end
    end
    first = first + k
  end
elseif op == OP_UNDO then
  -- Undo a spend (the compensation of a call across hash slots) or
  -- release a concurrency ticket, then report the state as it is.
  -- undo takes back key i's spend (its cost, at instant uat, or its
  -- concurrency ticket) from state s.
  local function undo(i, s)
    local alg, capU, r, w, cap, quota, window, delayU, fills, cost, ticket, uat, stamp = param(i)
    local next, expire = nil, nil
    --@UNDO@
    return next, expire
  end
  for i = 1, n do
    local s = load(KEYS[i])
    if s ~= nil then
      local next, expire = undo(i, s)
      store(KEYS[i], next, expire)
      s = next
    end
    local _, pc, remaining, _, reset, _, at = decide(i, s, true)
    local clamped = 0
    if pc then clamped = CLAMPED end
    put(UNSPENT + clamped, remaining, 0, reset, at)
  end
elseif op == OP_PEEK or op == OP_RESET then
  -- Peek at the states as they are, or forget them first (a reset, after
  -- which each key is full).
  for i = 1, n do
    local s = nil
    if op == OP_RESET then
      redis.call("DEL", KEYS[i])
    else
      s = load(KEYS[i])
    end
    local _, pc, remaining, _, reset, _, at = decide(i, s, true)
    local clamped = 0
    if pc then clamped = CLAMPED end
    put(UNSPENT + clamped, remaining, 0, reset, at)
  end
else
  return redis.error_reply("sluice: unknown op " .. tostring(op))
end
return reply
