--[[
  Pause a queue: set the claim gate. Idempotent; the backlog is untouched.
  KEYS  1 meta   HASH  `paused` = the claim gate (claim reads HEXISTS meta paused);
                       schema_version (set if absent: pausing may create the queue)
  ARGV  (none)
  Returns  1
  Events   (none)
  Moves    (none)
  Bound    O(1)
]]
local meta = KEYS[1]
-- @include schema
mark_queue(meta)
redis.call('HSET', meta, 'paused', '1')
return 1
