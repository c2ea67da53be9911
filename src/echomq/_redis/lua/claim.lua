--[[
  Claim up to `count` ready jobs and grant each a lease; promote due scheduled jobs first.
  KEYS  1 pending   ZSET  ready ids; score = -priority * 2^40 + seq (higher priority first)
        2 active    ZSET  claimed ids; score = lease deadline ms (server clock)
        3 schedule  ZSET  delayed ids; score = run-at ms
        4 meta      HASH  `paused` = the claim gate; `seq` = the FIFO counter
        5 wake      LIST  wake tokens for idle consumers
  ARGV  1 queue base   2 lease_ms   3 count (1..250)
  Returns  flat array: id, payload, token (attempts), failures, ... and, when fewer than
           `count` jobs were claimed, one trailing element: ms until the earliest scheduled
           job is due (0 when due now), or -1 when none is scheduled | {} when paused
  Errors   EMQARG   count is not 1..250 (nothing written; the verb refuses it first)
  Events   promoted (per due scheduled job); active (per claimed job, with its attempt)
  Moves    scheduled -> pending (due); pending -> active
  Bound    O((count + promoted) * log N); at most 250 claimed (validate.MAX_COUNT) and 100
           promoted per call
  The pause gate is read here, first, in the same round trip (not a separate HGET): a
  paused queue answers {} and nothing is written, not even a promotion.
  Every claimed row is stamped with lease_epoch = the server's run_id (INFO server).
  Promoted jobs beyond what this call takes push a wake token for the other consumers.
]]
local pending, active, schedule, meta, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local base = ARGV[1]
local lease = tonumber(ARGV[2])
local count = tonumber(ARGV[3])
local MAX_COUNT = 250
local MAX_PROMOTE = 100
if not count or count < 1 or count > MAX_COUNT then
  return redis.error_reply('EMQARG claim count must be 1..' .. MAX_COUNT)
end

-- the gate: any `paused` field means paused; the backlog is untouched
if redis.call('HEXISTS', meta, 'paused') == 1 then return {} end

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local channel = base .. 'events'

-- promote due scheduled jobs (at most MAX_PROMOTE per call), each to the back of its band
local due = redis.call('ZRANGEBYSCORE', schedule, '-inf', now, 'LIMIT', 0, MAX_PROMOTE)
local promoted = 0
if #due > 0 then
  redis.call('ZREM', schedule, unpack(due))
  local seq = redis.call('HINCRBY', meta, 'seq', #due) - #due
  for i, id in ipairs(due) do
    local row = base .. 'job:' .. id
    local priority = redis.call('HGET', row, 'priority')
    if priority then  -- an id with no row leaves the schedule and goes nowhere
      redis.call('ZADD', pending, -tonumber(priority) * 1099511627776 + seq + i, id)
      redis.call('HSET', row, 'state', 'pending')
      redis.call('PUBLISH', channel, '{"event":"promoted","job":"' .. id .. '"}')
      promoted = promoted + 1
    end
  end
end

local popped = redis.call('ZPOPMIN', pending, count)
local out = {}
if #popped > 0 then
  local run_id = string.match(redis.call('INFO', 'server'), 'run_id:(%w+)')
  local deadline = now + lease
  local leases = {}  -- one variadic ZADD for the batch (count <= 250: under unpack's limit)
  for i = 1, #popped, 2 do
    local id = popped[i]
    local row = base .. 'job:' .. id
    local fields = redis.call('HMGET', row, 'payload', 'failures')
    if fields[1] then  -- an id with no row leaves pending and is not claimed
      local token = redis.call('HINCRBY', row, 'attempts', 1)
      redis.call('HSET', row, 'state', 'active', 'lease_epoch', run_id, 'claimed_at', now)
      leases[#leases + 1] = deadline
      leases[#leases + 1] = id
      redis.call('PUBLISH', channel,
        '{"event":"active","job":"' .. id .. '","attempt":' .. token .. '}')
      out[#out + 1] = id
      out[#out + 1] = fields[1]
      out[#out + 1] = token
      out[#out + 1] = tonumber(fields[2] or '0')
    end
  end
  if #leases > 0 then redis.call('ZADD', active, unpack(leases)) end
end
if promoted > 0 and redis.call('ZCARD', pending) > 0 and redis.call('LLEN', wake) < 64 then
  redis.call('RPUSH', wake, promoted)
end
-- under-filled: tell an idle consumer how long it may block before a scheduled job is due
if #out < count * 4 then
  local first = redis.call('ZRANGE', schedule, 0, 0, 'WITHSCORES')
  out[#out + 1] = first[2] and math.max(0, tonumber(first[2]) - now) or -1
end
return out
