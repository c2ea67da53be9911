--[[
  A running job waits for the children it spawned (docs/flows.md "Dynamic children"):
  when some are open it leaves active for `waiting`, its slot and its lease freed, and
  the finish of its last open child (include/finished.lua, or flow_notify for a child on
  another queue) makes it pending again; its next run finds them finished.
  KEYS  1 row      HASH  the job
        2 active   ZSET  claimed ids
        3 waiting  ZSET  flow parents with open children; score = when it began waiting
  ARGV  1 id   2 token   3 queue base
  Returns  1 none is open, or (policy fail) one failed: the run goes on | 2 it waits |
           0 a cancel was requested (the job stays held: it ends cancelled) | -1 no row |
           -2 stale token | -3 not in active
  Events   waiting {job}
  Moves    active -> waiting
  Bound    O(log N)
  The checks (row, token, membership) come before the first write. A grouped job gives
  back its group's active slot (`leave_active`; docs/lanes.md).
]]
local row, active, waiting = KEYS[1], KEYS[2], KEYS[3]
local id, token, base = ARGV[1], ARGV[2], ARGV[3]
-- @include time
-- @include lanes
-- @include leave_active
local f = redis.call('HMGET', row, 'token', 'open', 'failed', 'policy', 'group',
  'cancel_requested')
if not f[1] then return -1 end
if f[1] ~= token then return -2 end
if not redis.call('ZSCORE', active, id) then return -3 end
local open, failed = tonumber(f[2] or '0'), tonumber(f[3] or '0')
if open <= 0 or (failed > 0 and (f[4] or 'fail') == 'fail') then return 1 end
if f[6] then return 0 end
local group = f[5]
if group then lanes_touch(base, group) end
leave_active(base, active, id, group)
redis.call('HSET', row, 'state', 'waiting')
redis.call('ZADD', waiting, now_ms(), id)
redis.call('PUBLISH', base .. 'events', '{"event":"waiting","job":"' .. id .. '"}')
return 2
