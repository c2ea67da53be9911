--[[
  Pause a queue: set the claim gate. Idempotent; the backlog is untouched.
  KEYS  1 meta   HASH  `paused` = the claim gate (claim reads HEXISTS meta paused);
                       schema_version (set if absent: a queue from before the field)
  ARGV  (none)
  Returns  1
  Errors   EMQNOQUEUE  the queue has no meta hash: it does not exist (nothing written)
  Events   (none)
  Moves    (none)
  Bound    O(1)
]]
local meta = KEYS[1]
-- @include schema
if redis.call('EXISTS', meta) == 0 then  -- no queue: a typo creates none (nothing written)
  return redis.error_reply('EMQNOQUEUE ' .. string.match(meta, '{(.-)}'))
end
mark_queue(meta)
redis.call('HSET', meta, 'paused', '1')
return 1
