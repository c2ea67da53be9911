--[[
  Register a repeatable, or update one: its record and its place in the registry (upsert).
  KEYS  1 repeat  ZSET  the registry: key -> next slot ms (+inf while the record is paused)
        2 record  HASH  emq:{q}:repeat:<key>
        3 meta    HASH  the queue's meta (marked: the queue exists from now on)
  ARGV  1 key   2 queue base (emq:{q}:)   3 task   4 payload
        5 every ms ('' for a cron schedule)   6 cron ('' for an interval)   7 tz
        8 missed policy (once | skip)   9 grace ms   10 priority   11 max_attempts
        12 source (api | task)   13 the schedule's first slot after now (ms)
        14 (optional) expires ms: each run's deadline, that long after its own slot
        (include/expiry.lua; '' or absent = none)
  Returns  {status, next slot ms}: status 1 created | 2 updated, same schedule (its next
           slot kept) | 3 updated, another schedule (next = ARGV 13)
  Errors   EMQFORMAT  the record has another layout version (nothing written)
  Events   repeat {"event":"repeat","job":"","key":key,"action":"added","next":ms}
           (also on the workers' channel emq:{q}:control: the schedulers wake up)
  Moves    (none)
  Bound    O(log R), R = the registered repeatables
  The same schedule (every, cron, tz all equal) keeps the record's next slot, so any
  number of workers registering their @queue.task(cron=...) at start change nothing. A
  paused record stays paused (its registry score stays +inf). The record's `expires_ms`
  is written when given, deleted when not (the fire passes it on: repeat.fire_call).
]]
local registry, record, meta = KEYS[1], KEYS[2], KEYS[3]
local key, base = ARGV[1], ARGV[2]
-- @include time
-- @include schema
-- @include repeat
local old = redis.call('HMGET', record, 'v', 'every_ms', 'cron', 'tz', 'next', 'paused')
if old[1] and tonumber(old[1]) ~= REPEAT_FORMAT then
  return redis.error_reply('EMQFORMAT repeat record ' .. key .. ' has layout version '
    .. old[1] .. ', not ' .. REPEAT_FORMAT)
end
local status, next_slot = 1, ARGV[13]
if old[1] then
  status = 3
  if (old[2] or '') == ARGV[5] and (old[3] or '') == ARGV[6] and (old[4] or '') == ARGV[7] then
    status, next_slot = 2, old[5] or ARGV[13]
  end
end

local now = now_ms()
mark_queue(meta)
redis.call('HSET', record, 'v', REPEAT_FORMAT, 'task', ARGV[3], 'payload', ARGV[4],
  'every_ms', ARGV[5], 'cron', ARGV[6], 'tz', ARGV[7], 'missed', ARGV[8], 'grace_ms', ARGV[9],
  'priority', ARGV[10], 'max_attempts', ARGV[11], 'source', ARGV[12], 'next', next_slot,
  'updated_at', now)
if status == 1 then redis.call('HSET', record, 'created_at', now, 'runs', 0) end
if ARGV[14] and ARGV[14] ~= '' then
  redis.call('HSET', record, 'expires_ms', ARGV[14])
else
  redis.call('HDEL', record, 'expires_ms')
end
if old[6] then
  redis.call('ZADD', registry, '+inf', key)
else
  redis.call('ZADD', registry, next_slot, key)
end
local event = cjson.encode(
  {event = 'repeat', job = '', key = key, action = 'added', next = tonumber(next_slot)})
redis.call('PUBLISH', base .. 'events', event)
redis.call('PUBLISH', base .. 'control', event)
return {status, tonumber(next_slot)}
