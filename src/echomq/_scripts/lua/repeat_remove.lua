--[[
  Remove a repeatable: its record and its registry entry. Runs already enqueued stay.
  KEYS  1 repeat  ZSET  the registry
        2 record  HASH  emq:{q}:repeat:<key>
  ARGV  1 key   2 queue base (emq:{q}:)
  Returns  1 removed | -1 no such repeatable (nothing written)
  Events   repeat {"event":"repeat","job":"","key":key,"action":"removed"}
           (also on the workers' channel emq:{q}:control: the schedulers wake up)
  Moves    (none)
  Bound    O(log R), R = the registered repeatables
  A record of another layout version is removed too: deleting it misreads nothing.
]]
local registry, record = KEYS[1], KEYS[2]
local key, base = ARGV[1], ARGV[2]
if redis.call('EXISTS', record) == 0 and not redis.call('ZSCORE', registry, key) then
  return -1
end
redis.call('DEL', record)
redis.call('ZREM', registry, key)
local event = cjson.encode({event = 'repeat', job = '', key = key, action = 'removed'})
redis.call('PUBLISH', base .. 'events', event)
redis.call('PUBLISH', base .. 'control', event)
return 1
