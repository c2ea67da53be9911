--[[
  Enqueue one or more jobs (a bulk enqueue is one call, all or nothing).
  KEYS  1 pending   ZSET  ready ids; score = -priority * 2^40 + seq (higher priority first, FIFO)
        2 schedule  ZSET  delayed ids; score = run-at ms
        3 meta      HASH  queue settings; seq = the FIFO counter; schema_version (set
                          if absent: the queue exists from now on)
        4 wake      LIST  wake tokens for idle consumers
  ARGV  1 queue base (emq:{q}:)   2 number of jobs n (1..250)
        then n groups of 8: id, payload, delay_ms, priority, max_attempts, task,
        keep_result ms, keep_dead ms (the last three '' = none: the row has no such field)
  Returns  n (the number enqueued)
  Errors   EMQDUP <id>   a row with that id exists (or the id repeats in the call)
           EMQARG        n is not 1..250 or does not match the argument count
  Events   enqueued | scheduled (per job)
  Moves    (none) -> pending | scheduled
  Bound    O(n * log N); at most 250 jobs per call (validate.MAX_ENQUEUE)
  Every id is checked before the first write, so a refused call writes nothing.
  It marks the queue (mark_queue: meta's schema_version), so a queue whose only jobs are
  delayed is found by discovery too.
]]
local MAX_JOBS = 250
local pending, schedule, meta, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local base = ARGV[1]
local n = tonumber(ARGV[2])
-- @include time
-- @include score
-- @include wake
-- @include schema
local GROUP = 8
if not n or n < 1 or n > MAX_JOBS or #ARGV ~= 2 + n * GROUP then
  return redis.error_reply('EMQARG enqueue takes 1..' .. MAX_JOBS .. ' jobs of 8 arguments')
end

-- checks first: no id may exist, or repeat
local OPTIONAL = {'task', 'keep_result', 'keep_dead'}
local seen, ready = {}, 0
for i = 0, n - 1 do
  local id = ARGV[3 + i * GROUP]
  if seen[id] or redis.call('EXISTS', base .. 'job:' .. id) == 1 then
    return redis.error_reply('EMQDUP job exists: ' .. id)
  end
  seen[id] = true
  if tonumber(ARGV[5 + i * GROUP]) == 0 then ready = ready + 1 end
end

local now = now_ms()
mark_queue(meta)
local channel = base .. 'events'
-- one counter bump for the whole call: the ready jobs take seq + 1 .. seq + ready
local seq = 0
if ready > 0 then seq = redis.call('HINCRBY', meta, 'seq', ready) - ready end
local ready_args = {}
for i = 0, n - 1 do
  local j = 3 + i * GROUP
  local id, payload = ARGV[j], ARGV[j + 1]
  local delay, priority, max_attempts = tonumber(ARGV[j + 2]), tonumber(ARGV[j + 3]), ARGV[j + 4]
  local row = base .. 'job:' .. id
  local extra = {}  -- task, keep_result, keep_dead: only those given
  for k, name in ipairs(OPTIONAL) do
    if ARGV[j + 4 + k] ~= '' then
      extra[#extra + 1] = name
      extra[#extra + 1] = ARGV[j + 4 + k]
    end
  end
  if delay > 0 then
    redis.call('HSET', row, 'state', 'scheduled', 'payload', payload, 'attempts', 0,
      'failures', 0, 'stalled', 0, 'priority', priority, 'max_attempts', max_attempts,
      'created_at', now, 'run_at', now + delay, unpack(extra))
    redis.call('ZADD', schedule, now + delay, id)
    redis.call('PUBLISH', channel, '{"event":"scheduled","job":"' .. id .. '"}')
  else
    seq = seq + 1
    redis.call('HSET', row, 'state', 'pending', 'payload', payload, 'attempts', 0,
      'failures', 0, 'stalled', 0, 'priority', priority, 'max_attempts', max_attempts,
      'created_at', now, unpack(extra))
    ready_args[#ready_args + 1] = band_score(priority, seq)
    ready_args[#ready_args + 1] = id
    if #ready_args == 512 then  -- one variadic ZADD per 256 ready jobs
      redis.call('ZADD', pending, unpack(ready_args))
      ready_args = {}
    end
    redis.call('PUBLISH', channel, '{"event":"enqueued","job":"' .. id .. '"}')
  end
end
if #ready_args > 0 then redis.call('ZADD', pending, unpack(ready_args)) end
if ready > 0 then push_wake(wake, ready) end
return n
