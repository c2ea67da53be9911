--[[
  Resume a queue: clear the claim gate and, if it was set, wake idle consumers. Idempotent.
  KEYS  1 meta   HASH  `paused` = the claim gate
        2 wake   LIST  wake tokens for idle consumers (kept short)
  ARGV  (none)
  Returns  1
  Errors   EMQNOQUEUE  the queue has no meta hash: it does not exist (nothing written)
  Events   (none)
  Moves    (none)
  Bound    O(1)
  Resuming a running queue changes nothing observable (docs/operations.md): no field, no wake token.
]]
local meta, wake = KEYS[1], KEYS[2]
-- @include wake
if redis.call('EXISTS', meta) == 0 then  -- no queue: a typo creates none (nothing written)
  return redis.error_reply('EMQNOQUEUE ' .. string.match(meta, '{(.-)}'))
end
if redis.call('HDEL', meta, 'paused') == 1 then push_wake(wake, 1) end
return 1
