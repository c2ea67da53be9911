--[[
  Complete a held job: fenced by its token, idempotent for the same token.
  KEYS  1 row        HASH  the job
        2 active     ZSET  claimed ids
  ARGV  1 id   2 token   3 result   4 queue base
  Returns  1 completed | 2 already completed with this token (nothing changed)
           -1 no row | -2 stale token | -3 not in active
  Events   completed
  Moves    active -> completed; completed -> (none) (the retention, other rows);
           waiting -> pending (its flow parent: the last open child, docs/flows.md)
  Bound    O(log N) for the job, plus the retention's cleanup: at most 100 expired index
           entries and 100 rows past the count cap (and their logs) per call
  A result `cancelled:<reason>` (a cancelled job, docs/runtime.md) finishes as cancelled:
  its completions entry says so, with the reason. finished (include/finished.lua) writes
  the completions entry, the counters and the row's retention (a TTL, and its place in
  `completed` scored by when it ends); its reads come before the first write.
  A grouped job gives back its group's active slot (the `leave_active` helper;
  docs/lanes.md).
]]
local row, active = KEYS[1], KEYS[2]
local id, token, result, base = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
-- @include time
-- @include lanes
-- @include leave_active
-- @include finished

-- checks, in order: row, token, (idempotent repeat), membership
local fields = redis.call('HMGET', row, 'token', 'state', 'group')
if not fields[1] then return -1 end
if fields[1] ~= token then return -2 end
if fields[2] == 'completed' then return 2 end
if not redis.call('ZSCORE', active, id) then return -3 end

local now = now_ms()
local group = fields[3]
if group then lanes_touch(base, group) end
local cancelled = string.sub(result, 1, 10) == 'cancelled:'
local fin = finish_read(base, 'completed', now, {{id, cancelled and 'cancelled' or 'completed'}})

leave_active(base, active, id, group)
redis.call('HSET', row, 'state', 'completed', 'result', result, 'finished_at', fin.now_arg)
redis.call('PUBLISH', base .. 'events', '{"event":"completed","job":"' .. id .. '"}')
if cancelled then
  finished(fin, 1, {reason = string.sub(result, 11)})
else
  finished(fin, 1, {result = result})
end
return 1
