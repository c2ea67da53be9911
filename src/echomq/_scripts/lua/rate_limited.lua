--[[
  A held job backs off (docs/lanes.md, "In-task back-off"): its task raised RateLimited.
  The job goes to the schedule until server now + ms without counting a failure, and its
  group (a grouped job) or else its queue claims nothing more until then.
  KEYS  1 row       HASH  the job
        2 active    ZSET  claimed ids
        3 schedule  ZSET  delayed ids
        4 meta      HASH  `blocked_until` = the queue's block (server ms)
  ARGV  1 id   2 token   3 ms   4 queue base
  Returns  the block's end (server ms) | 0 a cancel was requested (the job stays held: it
           ends cancelled) | -1 no row | -2 stale token | -3 not in active
  Events   rate_limited {job, until_ms, group?}; and scheduled {job, delay_ms} on the
           workers' channel (emq:{q}:control), as a retry with a delay publishes it
  Moves    active -> scheduled
  Bound    O(log N)
  The checks (row, token, membership, no cancel request) come before the first write. The
  job's failures and last_error stay as they were; its next claim is a new run (its token
  grows). A grouped job's group leaves the ring for `glimited`, scored by the block's end
  (a later end kept: ZADD GT), and gives back its active slot (`leave_active`); the claim
  takes it back when the block ends, as for a full rate window. An ungrouped job blocks
  the queue: meta `blocked_until` (the later end kept), which the claim reads with its
  gate and answers the ms until then.
]]
local row, active, schedule, meta = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id, token, base = ARGV[1], ARGV[2], ARGV[4]
local ms = tonumber(ARGV[3])
-- @include time
-- @include lanes
-- @include to_schedule
local f = redis.call('HMGET', row, 'token', 'group', 'cancel_requested')
if not f[1] then return -1 end
if f[1] ~= token then return -2 end
if not redis.call('ZSCORE', active, id) then return -3 end
if f[3] then return 0 end
local group = f[2]
if group then lanes_touch(base, group) end
local blocked = tonumber(redis.call('HGET', meta, 'blocked_until') or '0')
local now = now_ms()
local until_ms = now + ms
if group then
  redis.call('ZREM', base .. 'gring', group)
  redis.call('ZADD', base .. 'glimited', 'GT', until_ms, group)
elseif until_ms > blocked then
  redis.call('HSET', meta, 'blocked_until', until_ms)
end
to_schedule(base, active, schedule, row, id, group, until_ms, ms)
redis.call('PUBLISH', base .. 'events', cjson.encode({event = 'rate_limited', job = id,
  until_ms = until_ms, group = group or nil}))
return until_ms
