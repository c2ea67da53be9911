--[[
  Sleep a held job durably (docs/steps.md): commit its sleep step, then move it to the
  schedule until server now + ms. Nothing counts a failure; its slot and its lease go.
  KEYS  1 row       HASH  the job
        2 active    ZSET  claimed ids
        3 schedule  ZSET  delayed ids
  ARGV  1 id   2 token   3 field (step:<name>)   4 ms   5 queue base
  Returns  the sleep's end (server ms) | 1 the row already holds this step | 0 a cancel
           was requested (the job stays held: it ends cancelled) | -1 no row | -2 stale
           token | -3 not in active (nothing written but for the sleep's end)
  Events   sleeping {job, until_ms}; and scheduled {job, delay_ms} on the workers'
           channel (emq:{q}:control), as a retry with a delay publishes it
  Moves    active -> scheduled
  Bound    O(log N)
  The checks (row, token, membership, the step not yet written) come before the first
  write. The next claim of the job is a new run (its token grows): it finds the sleep step
  written and goes on after it. A grouped job gives back its group's active slot
  (`leave_active`; docs/lanes.md).
]]
local row, active, schedule = KEYS[1], KEYS[2], KEYS[3]
local id, token, step, base = ARGV[1], ARGV[2], ARGV[3], ARGV[5]
local ms = tonumber(ARGV[4])
-- @include time
-- @include lanes
-- @include to_schedule
local f = redis.call('HMGET', row, 'token', 'group', step, 'cancel_requested')
if not f[1] then return -1 end
if f[1] ~= token then return -2 end
if not redis.call('ZSCORE', active, id) then return -3 end
if f[3] then return 1 end
if f[4] then return 0 end
local group = f[2]
if group then lanes_touch(base, group) end
local now = now_ms()
local until_ms = now + ms
redis.call('HSET', row, step, cjson.encode({state = 'sleep', token = tonumber(token),
  ms = 0, at_ms = now, until_ms = until_ms}) .. '\n')
to_schedule(base, active, schedule, row, id, group, until_ms, ms)
redis.call('PUBLISH', base .. 'events',
  '{"event":"sleeping","job":"' .. id .. '","until_ms":' .. until_ms .. '}')
return until_ms
