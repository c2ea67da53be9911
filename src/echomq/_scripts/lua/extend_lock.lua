--[[
  Checkpoint a lease: re-score the active member to server now + lease (docs/runtime.md).
  KEYS  1 active  ZSET  claimed ids; score = lease deadline ms
        2 row     HASH  the job
  ARGV  1 id   2 token   3 lease_ms
  Returns  1 re-scored | -1 no row | -2 stale token | -3 not in active (a reaped lease
           is not revived)
  Events   (none)
  Moves    (none)
  Bound    O(log N)
  The checks run in this order: row, token, membership. So an id that is both stale and
  out of active answers -2 (stale). (The lifecycle design answers a stale extend with an
  error reply; every script here answers the code -2: docs/lua.md, "Reply codes".)
  A lapsed lease not yet collected still extends.
  Stamps lease_epoch with the server's run_id (written only when it differs).
]]
local active, row = KEYS[1], KEYS[2]
-- @include time
-- @include run_id
local f = redis.call('HMGET', row, 'token', 'lease_epoch')
if not f[1] then return -1 end
if f[1] ~= ARGV[2] then return -2 end
if not redis.call('ZSCORE', active, ARGV[1]) then return -3 end
local now = now_ms()
redis.call('ZADD', active, now + tonumber(ARGV[3]), ARGV[1])
local run_id = server_run_id()
if f[2] ~= run_id then redis.call('HSET', row, 'lease_epoch', run_id) end
return 1
