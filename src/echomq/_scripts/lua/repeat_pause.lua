--[[
  Pause a repeatable: no run fires until it is resumed (its registry score is +inf).
  KEYS  1 repeat  ZSET  the registry
        2 record  HASH  emq:{q}:repeat:<key>
  ARGV  1 key   2 queue base (emq:{q}:)
  Returns  1 paused | 2 already paused (nothing written) | -1 no such repeatable
  Errors   EMQFORMAT  the record has another layout version (nothing written)
  Events   repeat {"event":"repeat","job":"","key":key,"action":"paused"}
           (also on the workers' channel emq:{q}:control: the schedulers wake up)
  Moves    (none)
  Bound    O(log R), R = the registered repeatables
]]
local registry, record = KEYS[1], KEYS[2]
local key, base = ARGV[1], ARGV[2]
-- @include repeat
local f = redis.call('HMGET', record, 'v', 'paused')
if not f[1] then return -1 end
if tonumber(f[1]) ~= REPEAT_FORMAT then
  return redis.error_reply('EMQFORMAT repeat record ' .. key .. ' has layout version '
    .. f[1] .. ', not ' .. REPEAT_FORMAT)
end
if f[2] then return 2 end
redis.call('HSET', record, 'paused', '1')
redis.call('ZADD', registry, '+inf', key)
local event = cjson.encode({event = 'repeat', job = '', key = key, action = 'paused'})
redis.call('PUBLISH', base .. 'events', event)
redis.call('PUBLISH', base .. 'control', event)
return 1
