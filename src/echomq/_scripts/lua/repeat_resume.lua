--[[
  Resume a paused repeatable at its first slot after now: the runs due while it was paused
  do not fire.
  KEYS  1 repeat  ZSET  the registry
        2 record  HASH  emq:{q}:repeat:<key>
  ARGV  1 key   2 queue base (emq:{q}:)   3 the schedule's first slot after now (ms)
  Returns  {1 resumed | 2 not paused (nothing written), next slot ms} | -1 no such repeatable
  Errors   EMQFORMAT  the record has another layout version (nothing written)
  Events   repeat {"event":"repeat","job":"","key":key,"action":"resumed","next":ms}
           (also on the workers' channel emq:{q}:control: the schedulers wake up)
  Moves    (none)
  Bound    O(log R), R = the registered repeatables
]]
local registry, record = KEYS[1], KEYS[2]
local key, base = ARGV[1], ARGV[2]
-- @include repeat
local f = redis.call('HMGET', record, 'v', 'paused', 'next')
if not f[1] then return -1 end
if tonumber(f[1]) ~= REPEAT_FORMAT then
  return redis.error_reply('EMQFORMAT repeat record ' .. key .. ' has layout version '
    .. f[1] .. ', not ' .. REPEAT_FORMAT)
end
if not f[2] then return {2, tonumber(f[3])} end
redis.call('HDEL', record, 'paused')
redis.call('HSET', record, 'next', ARGV[3])
redis.call('ZADD', registry, ARGV[3], key)
local event = cjson.encode(
  {event = 'repeat', job = '', key = key, action = 'resumed', next = tonumber(ARGV[3])})
redis.call('PUBLISH', base .. 'events', event)
redis.call('PUBLISH', base .. 'control', event)
return {1, tonumber(ARGV[3])}
