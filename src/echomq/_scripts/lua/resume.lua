--[[
  Resume a queue: clear the claim gate and, if it was set, wake idle consumers. Idempotent.
  KEYS  1 meta   HASH  `paused` = the claim gate
        2 wake   LIST  wake tokens for idle consumers (kept short)
  ARGV  (none)
  Returns  1
  Events   (none)
  Moves    (none)
  Bound    O(1)
  Resuming a running queue changes nothing observable (docs/operations.md): no field, no wake token.
]]
local meta, wake = KEYS[1], KEYS[2]
-- @include wake
if redis.call('HDEL', meta, 'paused') == 1 then push_wake(wake, 1) end
return 1
