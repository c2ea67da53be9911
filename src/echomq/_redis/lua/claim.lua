--[[
  Claim up to `count` ready jobs and grant each a lease; promote due scheduled jobs first.
  KEYS  1 pending   ZSET  ready ids (priority, then FIFO)
        2 active    ZSET  claimed ids; score = lease deadline ms (server clock)
        3 schedule  ZSET  delayed ids; score = run-at ms
        4 meta      HASH  `paused` = the claim gate; `seq` = the FIFO counter
  ARGV  1 queue base   2 lease_ms   3 count
  Returns  flat array: id, payload, token (attempts), failures, ... | {} when paused or empty
  Events   active (per job)
  Moves    scheduled -> pending (due); pending -> active
  The row is stamped with lease_epoch = the server's run_id (INFO server).
]]
local pending, active, schedule, meta = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local base = ARGV[1]
local lease = tonumber(ARGV[2])
local count = tonumber(ARGV[3])

-- the pause gate is a field, read first: the backlog is untouched
if redis.call('HEXISTS', meta, 'paused') == 1 then return {} end

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)

-- promote due scheduled jobs (bounded per call)
local due = redis.call('ZRANGEBYSCORE', schedule, '-inf', now, 'LIMIT', 0, 1000)
if #due > 0 then
  for _, id in ipairs(due) do
    local row = base .. 'job:' .. id
    local priority = redis.call('HGET', row, 'priority')
    if priority then
      local seq = redis.call('HINCRBY', meta, 'seq', 1)
      redis.call('ZADD', pending, -tonumber(priority) * 1099511627776 + seq, id)
      redis.call('HSET', row, 'state', 'pending')
    end
  end
  redis.call('ZREM', schedule, unpack(due))
end

local ids = redis.call('ZRANGE', pending, 0, count - 1)
if #ids == 0 then return {} end
redis.call('ZREM', pending, unpack(ids))

local run_id = string.match(redis.call('INFO', 'server'), 'run_id:(%w+)')
local deadline = now + lease
local channel = base .. 'events'
local out = {}
for _, id in ipairs(ids) do
  local row = base .. 'job:' .. id
  local fields = redis.call('HMGET', row, 'payload', 'failures')
  if fields[1] then  -- a ghost id (no row) is dropped from pending and not claimed
    local token = redis.call('HINCRBY', row, 'attempts', 1)
    redis.call('HSET', row, 'state', 'active', 'lease_epoch', run_id, 'claimed_at', now)
    redis.call('ZADD', active, deadline, id)
    redis.call('PUBLISH', channel, '{"event":"active","job":"' .. id .. '"}')
    out[#out + 1] = id
    out[#out + 1] = fields[1]
    out[#out + 1] = token
    out[#out + 1] = tonumber(fields[2] or '0')
  end
end
return out
