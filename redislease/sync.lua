-- One round of the lease protocol for one member of one group (see
-- lease.Coordinator.Sync). Every key shares the group's hash tag.
--
-- KEYS[1] members: sorted set, member -> expiry (ms)
-- KEYS[2] wants:   hash, member -> partitions wanted
-- KEYS[3] holders: hash, partition -> "member|epoch|expiry"
-- KEYS[4] epochs:  hash, partition -> last epoch granted
-- KEYS[5] given:   hash, partition -> 1 when given back gracefully
-- KEYS[6] clock:   the latest TIME this group saw (ms)
-- KEYS[7] shape:   "partitions|ttl" the live members use
--
-- ARGV: member, ttl (ms), partitions, want (-1: leave), acquire,
--       n held, held pairs (partition, epoch)...,
--       n release, release pairs...
--
-- Reply: {self, n wants, wants..., n renewed, (p, e)..., n acquired,
--         (p, e, taken over 0/1)...}; self is -1 after a leave.
local member = ARGV[1]
local ttl = tonumber(ARGV[2])
local parts = tonumber(ARGV[3])
local want = tonumber(ARGV[4])
local acquire = tonumber(ARGV[5])

-- Redis's clock, never earlier than this group saw it (a clock stepped
-- back would lengthen every lease otherwise).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local seen = tonumber(redis.call('GET', KEYS[6]) or '0')
if now < seen then now = seen end
if seen > 0 and now - seen > ttl then
  -- No round for more than a TTL: the group was idle, or Redis came back
  -- from a copy older than its last round (a snapshot, a failover) and
  -- what it says was given back may have been acquired since. Trust no
  -- "given back": the next acquisitions are takeovers.
  redis.call('DEL', KEYS[5])
end
local keep = math.max(10 * ttl, 60000)
-- Numbers go to Redis as whole decimals: tostring would round an epoch.
local function int(x) return string.format('%.0f', x) end
redis.call('SET', KEYS[6], int(now), 'PX', keep)

-- Members: forget those whose heartbeat lapsed, then record this one.
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', int(now))
for _, m in ipairs(gone) do
  redis.call('ZREM', KEYS[1], m)
  redis.call('HDEL', KEYS[2], m)
end
-- Every live member must cut the group the same way: a process with
-- other partitions or another TTL would spend shares that do not add up.
local shape = parts .. '|' .. ttl
local had = redis.call('GET', KEYS[7])
if want >= 0 and had and had ~= shape then
  local others = redis.call('ZCARD', KEYS[1])
  if redis.call('ZSCORE', KEYS[1], member) then others = others - 1 end
  if others > 0 then
    return redis.error_reply('MISMATCH the group\'s live members use partitions|ttl ' .. had .. ', this member ' .. shape)
  end
end
if want >= 0 then
  redis.call('SET', KEYS[7], shape, 'PX', keep)
  redis.call('ZADD', KEYS[1], int(now + ttl), member)
  redis.call('HSET', KEYS[2], member, want)
else
  redis.call('ZREM', KEYS[1], member)
  redis.call('HDEL', KEYS[2], member)
end

-- holder returns the partition's holder record as (member, epoch, expiry).
local function holder(p)
  local rec = redis.call('HGET', KEYS[3], p)
  if not rec then return nil end
  local m, e, x = string.match(rec, '^(.*)|(%d+)|(%d+)$')
  return m, tonumber(e), tonumber(x)
end

local i = 6
local nheld = tonumber(ARGV[i]); i = i + 1
local held = {}
for _ = 1, nheld do
  held[#held + 1] = {tonumber(ARGV[i]), tonumber(ARGV[i + 1])}
  i = i + 2
end
local nrelease = tonumber(ARGV[i]); i = i + 1
for _ = 1, nrelease do
  local p, e = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  i = i + 2
  local m, he = holder(p)
  if m == member and he == e then
    redis.call('HDEL', KEYS[3], p)
    redis.call('HSET', KEYS[5], p, 1)
  end
end

-- Renew what is still this member's under the same epoch, lapsed or not:
-- no one else acquired it since, so no one else spent it.
local renewed = {}
for _, h in ipairs(held) do
  local m, he = holder(h[1])
  if m == member and he == h[2] then
    redis.call('HSET', KEYS[3], h[1], member .. '|' .. int(h[2]) .. '|' .. int(now + ttl))
    renewed[#renewed + 1] = h[1]
    renewed[#renewed + 1] = h[2]
  end
end

-- Acquire free partitions: none holds them, or the holder's lease lapsed.
local acquired = {}
local got = 0
if want >= 0 then
  for p = 0, parts - 1 do
    if got >= acquire then break end
    local m, _, x = holder(p)
    local free, taken = false, 1
    if m == nil then
      free = true
      if redis.call('HEXISTS', KEYS[5], p) == 1 then taken = 0 end
    elseif x <= now then
      free = true
    end
    if free then
      -- Epochs run at least with the clock (in microseconds), so that
      -- one granted after Redis lost its state or came back from an
      -- older copy is still above every epoch granted before.
      local e = redis.call('HINCRBY', KEYS[4], p, 1)
      if e < now * 1000 then
        e = now * 1000
        redis.call('HSET', KEYS[4], p, int(e))
      end
      redis.call('HSET', KEYS[3], p, member .. '|' .. int(e) .. '|' .. int(now + ttl))
      redis.call('HDEL', KEYS[5], p)
      acquired[#acquired + 1] = p
      acquired[#acquired + 1] = e
      acquired[#acquired + 1] = taken
      got = got + 1
    end
  end
end

for k = 1, 5 do redis.call('PEXPIRE', KEYS[k], keep) end

-- The live members' wants in the order of their IDs.
local ids = redis.call('HKEYS', KEYS[2])
table.sort(ids)
local reply = {-1, #ids}
for n, id in ipairs(ids) do
  if id == member then reply[1] = n - 1 end
  reply[#reply + 1] = tonumber(redis.call('HGET', KEYS[2], id))
end
reply[#reply + 1] = #renewed / 2
for _, v in ipairs(renewed) do reply[#reply + 1] = v end
reply[#reply + 1] = #acquired / 3
for _, v in ipairs(acquired) do reply[#reply + 1] = v end
return reply
