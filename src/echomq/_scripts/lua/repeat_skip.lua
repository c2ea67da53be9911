--[[
  Advance a due repeatable without a run (missed = skip: its latest due slot is later than
  the grace): a compare-and-set on `next`, like a fired run's.
  KEYS  1 repeat  ZSET  the registry
        2 record  HASH  emq:{q}:repeat:<key>
  ARGV  1 key   2 the record's next slot ms as read   3 the new next slot ms
        4 the due slots skipped (>= 1)
  Returns  1 advanced | 0 not advanced (next is not the one read, or the record is gone or
           paused: nothing written)
  Errors   EMQFORMAT  the record has another layout version (nothing written)
  Events   (none)
  Moves    (none)
  Bound    O(log R), R = the registered repeatables
]]
local registry, record = KEYS[1], KEYS[2]
local key = ARGV[1]
-- @include repeat
local f = redis.call('HMGET', record, 'v', 'next', 'paused')
if f[1] and tonumber(f[1]) ~= REPEAT_FORMAT then
  return redis.error_reply('EMQFORMAT repeat record ' .. key .. ' has layout version '
    .. f[1] .. ', not ' .. REPEAT_FORMAT)
end
if not f[1] or f[3] or tonumber(f[2]) ~= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', record, 'next', ARGV[3])
redis.call('HINCRBY', record, 'skipped', ARGV[4])
redis.call('ZADD', registry, ARGV[3], key)
return 1
