--[[
  Replace a job's payload.
  KEYS  1 row   HASH  the job
  ARGV  1 payload
  Returns  1 | -1 no row (nothing written)
  Events   (none)
  Moves    (none)
  Bound    O(1) (plus the payload's size)
]]
local row = KEYS[1]
if redis.call('EXISTS', row) == 0 then return -1 end
redis.call('HSET', row, 'payload', ARGV[1])
return 1
