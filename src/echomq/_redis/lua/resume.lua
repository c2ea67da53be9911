--[[
  Resume a queue: clear the claim gate and wake idle consumers. Idempotent.
  KEYS  1 meta   HASH  `paused` = the claim gate
        2 wake   LIST  wake tokens for idle consumers (kept short)
  ARGV  (none)
  Returns  1
  Events   (none)
  Moves    (none)
]]
local meta, wake = KEYS[1], KEYS[2]
redis.call('HDEL', meta, 'paused')
if redis.call('LLEN', wake) < 64 then redis.call('RPUSH', wake, 1) end
return 1
