--[[
  Claim up to `count` ready jobs and grant each a lease; promote due scheduled jobs first.
  KEYS  1 pending   ZSET  ready ids; score = -priority * 2^40 + seq (higher priority first)
        2 active    ZSET  claimed ids; score = lease deadline ms (server clock)
        3 schedule  ZSET  delayed ids; score = run-at ms
        4 meta      HASH  `paused` = the claim gate; `seq` = the FIFO counter
        5 wake      LIST  wake tokens for idle consumers
  ARGV  1 queue base   2 lease_ms   3 count (1..250)   4 the claiming worker's id ('': none)
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
  Reads before writes (docs/lua.md, rule 1): the due ids and their rows, the first `count`
  pending ids and the rows of those it will take are all read before the first write, so
  a row another node holds (a reshard moving keys one by one) fails the call having
  changed nothing. The jobs taken are the `count` lowest scores of pending and the
  promoted together, as if the promoted were added first and `count` popped.
  Every claimed row is stamped with lease_epoch = the server's run_id (INFO server) and
  `worker` = the claiming worker's id (its heartbeat record; deleted when none is given),
  which explain reads to say whether the holder is alive, blocked or gone.
  Promoted jobs beyond what this call takes push a wake token for the other consumers.
]]
local pending, active, schedule, meta, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local base = ARGV[1]
local lease = tonumber(ARGV[2])
local count = tonumber(ARGV[3])
local worker = ARGV[4]
local MAX_COUNT = 250
local MAX_PROMOTE = 100
-- @include time
-- @include score
-- @include wake
-- @include run_id
if not count or count < 1 or count > MAX_COUNT then
  return redis.error_reply('EMQARG claim count must be 1..' .. MAX_COUNT)
end

-- the gate: any `paused` field means paused; the backlog is untouched
if redis.call('HEXISTS', meta, 'paused') == 1 then return {} end

local now = now_ms()
local channel = base .. 'events'

-- reads: the due scheduled jobs (each to the back of its band), then the candidates
local due = redis.call('ZRANGEBYSCORE', schedule, '-inf', now, 'LIMIT', 0, MAX_PROMOTE)
local promoted = {}  -- {id, score}: due ids with a row (an id with none goes nowhere)
local candidates = {}  -- {id, score, promoted?}
if #due > 0 then
  local seq = tonumber(redis.call('HGET', meta, 'seq') or '0')
  for i, id in ipairs(due) do
    local priority = redis.call('HGET', base .. 'job:' .. id, 'priority')
    if priority then
      local job = {id, band_score(priority, seq + i), true}
      promoted[#promoted + 1] = job
      candidates[#candidates + 1] = job
    end
  end
end
local head = redis.call('ZRANGE', pending, 0, count - 1, 'WITHSCORES')
for i = 1, #head, 2 do candidates[#candidates + 1] = {head[i], tonumber(head[i + 1]), false} end
if #promoted > 0 then  -- ZPOPMIN's order: score, then id
  table.sort(candidates, function(a, b)
    if a[2] ~= b[2] then return a[2] < b[2] end
    return a[1] < b[1]
  end)
end
local taken, rows, from_pending = {}, {}, {}
for i = 1, math.min(count, #candidates) do
  local id = candidates[i][1]
  taken[id] = true
  rows[i] = redis.call('HMGET', base .. 'job:' .. id, 'payload', 'failures')
  if not candidates[i][3] then from_pending[#from_pending + 1] = id end
end
local run_id = #rows > 0 and server_run_id() or nil

-- writes
if #due > 0 then
  redis.call('ZREM', schedule, unpack(due))
  redis.call('HINCRBY', meta, 'seq', #due)
end
for _, job in ipairs(promoted) do
  if not taken[job[1]] then
    redis.call('ZADD', pending, job[2], job[1])
    redis.call('HSET', base .. 'job:' .. job[1], 'state', 'pending')
  end
  redis.call('PUBLISH', channel, '{"event":"promoted","job":"' .. job[1] .. '"}')
end
if #from_pending > 0 then redis.call('ZREM', pending, unpack(from_pending)) end
local out = {}
local deadline = now + lease
local leases = {}  -- one variadic ZADD for the batch (count <= 250: under unpack's limit)
for i, fields in ipairs(rows) do
  local id = candidates[i][1]
  if fields[1] then  -- an id with no row leaves pending and is not claimed
    local row = base .. 'job:' .. id
    local token = redis.call('HINCRBY', row, 'attempts', 1)
    if worker ~= '' then
      redis.call('HSET', row, 'state', 'active', 'lease_epoch', run_id, 'claimed_at', now,
        'worker', worker)
    else
      redis.call('HSET', row, 'state', 'active', 'lease_epoch', run_id, 'claimed_at', now)
      redis.call('HDEL', row, 'worker')
    end
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
if #promoted > 0 and redis.call('ZCARD', pending) > 0 then push_wake(wake, #promoted) end
-- under-filled: tell an idle consumer how long it may block before a scheduled job is due
if #out < count * 4 then
  local first = redis.call('ZRANGE', schedule, 0, 0, 'WITHSCORES')
  out[#out + 1] = first[2] and math.max(0, tonumber(first[2]) - now) or -1
end
return out
