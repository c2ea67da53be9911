--[[
  Fail a held job: retry it (through the schedule set, or pending when the delay is 0) or,
  once its failures reach max_attempts (or when asked), dead-letter it.
  KEYS  1 row        HASH  the job
        2 active     ZSET  claimed ids
        3 schedule   ZSET  delayed ids
        4 pending    ZSET  ready ids
        5 meta       HASH  seq = the FIFO counter
        6 wake       LIST  wake tokens
  ARGV  1 id   2 token   3 error text   4 retry delay ms   5 queue base
        6 '1' = dead now, whatever the count
  Returns  'retrying' | 'dead' | -1 no row | -2 stale token | -3 not in active
  Events   retrying {job, error, delay_ms} | dead {job, error}; a retry with a delay also
           publishes retrying {job, delay_ms} on the workers' channel (emq:{q}:control)
  Moves    active -> scheduled | pending | dead; dead | expired -> (none) (the retention,
           other rows);
           waiting -> pending (its flow parent, docs/flows.md); (none) -> pending (a dead
           job's error callback on its queue, include/link_error.lua)
  Bound    O(log N) for the job; dead: plus the retention's cleanup, at most 100 expired
           index entries and 100 rows past the count cap (and their logs) per call
  A dead job finishes (include/finished.lua): its completions entry, the counters, and
  its row's retention (a TTL of keep_dead, its place in `dead` scored by when it ends);
  the reads it needs come before the first write.
  A grouped job gives back its group's active slot (`leave_active`) and a retry now goes
  back to its lane (`ready`; docs/lanes.md).
]]
local row, active, schedule, pending = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local meta, wake = KEYS[5], KEYS[6]
local id, token, err, base = ARGV[1], ARGV[2], ARGV[3], ARGV[5]
local delay = tonumber(ARGV[4])
-- @include time
-- @include score
-- @include lanes
-- @include ready
-- @include leave_active
-- @include finished

-- checks, in order: row, token, membership
local fields = redis.call('HMGET', row, 'token', 'failures', 'max_attempts', 'priority',
  'group')
if not fields[1] then return -1 end
if fields[1] ~= token then return -2 end
if not redis.call('ZSCORE', active, id) then return -3 end

local group = fields[5]
if group then lanes_touch(base, group) end
local now = now_ms()
local failures = tonumber(fields[2] or '0') + 1
local max_attempts = tonumber(fields[3] or '1')
local channel = base .. 'events'
local dies = ARGV[6] == '1' or failures >= max_attempts
local fin = dies and finish_read(base, 'dead', now, {{id, 'dead'}})
leave_active(base, active, id, group)
if dies then
  redis.call('HSET', row, 'state', 'dead', 'failures', failures, 'last_error', err,
    'finished_at', now)
  redis.call('PUBLISH', channel, cjson.encode({event = 'dead', job = id, error = err}))
  finished(fin, 1, {error = err, failures = failures})
  return 'dead'
end
if delay > 0 then
  redis.call('HSET', row, 'state', 'scheduled', 'failures', failures, 'last_error', err,
    'run_at', now + delay)
  redis.call('ZADD', schedule, now + delay, id)
  redis.call('PUBLISH', base .. 'control',
    '{"event":"retrying","job":"' .. id .. '","delay_ms":' .. delay .. '}')
else
  local seq = redis.call('HINCRBY', meta, 'seq', 1)
  redis.call('HSET', row, 'state', 'pending', 'failures', failures, 'last_error', err)
  ready(base, pending, id, group, band_score(fields[4] or '0', seq))
end
redis.call('PUBLISH', channel, cjson.encode({event = 'retrying', job = id, error = err,
  delay_ms = delay}))
return 'retrying'
