--[[
  Fail a held job: retry it (through the schedule set, or pending when the delay is 0) or,
  once its failures reach max_attempts (or when asked), dead-letter it.
  KEYS  1 row        HASH  the job
        2 active     ZSET  claimed ids
        3 schedule   ZSET  delayed ids
        4 dead       ZSET  dead-lettered ids; score = time of death ms
        5 pending    ZSET  ready ids
        6 metrics    HASH  emq:{q}:metrics:failed; field count (dead-lettered jobs)
        7 meta       HASH  seq = the FIFO counter
        8 wake       LIST  wake tokens
  ARGV  1 id   2 token   3 error text   4 retry delay ms   5 queue base
        6 '1' = dead now, whatever the count
  Returns  'retrying' | 'dead' | -1 no row | -2 stale token | -3 not in active
  Events   retrying {job, error, delay_ms} | dead {job, error}
  Moves    active -> scheduled | pending | dead
  Bound    O(log N)
]]
local row, active, schedule, dead, pending = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local metrics, meta, wake = KEYS[6], KEYS[7], KEYS[8]
local id, token, err, base = ARGV[1], ARGV[2], ARGV[3], ARGV[5]
local delay = tonumber(ARGV[4])
-- @include time
-- @include score
-- @include wake

-- checks, in order: row, token, membership
local fields = redis.call('HMGET', row, 'attempts', 'failures', 'max_attempts', 'priority')
if not fields[1] then return -1 end
if fields[1] ~= token then return -2 end
if not redis.call('ZSCORE', active, id) then return -3 end

local now = now_ms()
local failures = tonumber(fields[2] or '0') + 1
local max_attempts = tonumber(fields[3] or '1')
local channel = base .. 'events'
redis.call('ZREM', active, id)
if ARGV[6] == '1' or failures >= max_attempts then
  redis.call('HSET', row, 'state', 'dead', 'failures', failures, 'last_error', err,
    'finished_at', now)
  redis.call('ZADD', dead, now, id)
  redis.call('HINCRBY', metrics, 'count', 1)
  redis.call('PUBLISH', channel, cjson.encode({event = 'dead', job = id, error = err}))
  return 'dead'
end
if delay > 0 then
  redis.call('HSET', row, 'state', 'scheduled', 'failures', failures, 'last_error', err,
    'run_at', now + delay)
  redis.call('ZADD', schedule, now + delay, id)
else
  local seq = redis.call('HINCRBY', meta, 'seq', 1)
  redis.call('HSET', row, 'state', 'pending', 'failures', failures, 'last_error', err)
  redis.call('ZADD', pending, band_score(fields[4] or '0', seq), id)
  push_wake(wake, 1)
end
redis.call('PUBLISH', channel, cjson.encode({event = 'retrying', job = id, error = err,
  delay_ms = delay}))
return 'retrying'
