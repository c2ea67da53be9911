--[[
  Complete a held job: fenced by its token, idempotent for the same token.
  KEYS  1 row        HASH  the job
        2 active     ZSET  claimed ids
  ARGV  1 id   2 token   3 result   4 queue base
  Returns  1 completed | 2 already finished with this token (nothing changed)
           -1 no row | -2 stale token | -3 not in active
  Events   completed | cancelled
  Moves    active -> completed | cancelled; completed | cancelled -> (none) (the
           retention, other rows);
           waiting -> pending (its flow parent: the last open child, docs/flows.md)
  Bound    O(log N) for the job, plus the retention's cleanup: at most 100 expired index
           entries and 100 rows past the count cap (and their logs) per call
  A result `cancelled:<reason>` (the worker's word for a cancelled run, docs/runtime.md)
  is not stored as a result: the job ends in state `cancelled`, `cancel_reason` = the
  reason, kept in the `cancelled` index (the retention of a completed row). finished
  (include/finished.lua) writes the completions entry (`cancelled`, with the reason), the
  counters and the row's retention (a TTL, and its place in `completed` | `cancelled`
  scored by when it ends); its reads come before the first write.
  A grouped job gives back its group's active slot (the `leave_active` helper;
  docs/lanes.md).
]]
local row, active = KEYS[1], KEYS[2]
local id, token, result, base = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
-- @include time
-- @include lanes
-- @include leave_active
-- @include finished
-- @include finish_row

-- checks, in order: row, token, (idempotent repeat), membership
local fields = redis.call('HMGET', row, 'token', 'state', 'group', 'priority')
if not fields[1] then return -1 end
if fields[1] ~= token then return -2 end
if fields[2] == 'completed' or fields[2] == 'cancelled' then return 2 end
if not redis.call('ZSCORE', active, id) then return -3 end

local now = now_ms()
local group = fields[3]
if group then lanes_touch(base, group) end
local cancelled = string.sub(result, 1, 10) == 'cancelled:'
local state = cancelled and 'cancelled' or 'completed'
local fin = finish_read(base, state, now, {{id, state}})

leave_active(base, active, id, group)
-- the row loses what only the running job needs (include/finish_row.lua)
local keep_payload, zero_priority = fin.keep_payload ~= 0, fields[4] == '0'
if cancelled then
  local reason = string.sub(result, 11)
  finish_row(row, keep_payload, zero_priority,
    {'state', 'cancelled', 'cancel_reason', reason, 'finished_at', fin.now_arg})
  redis.call('PUBLISH', base .. 'events', '{"event":"cancelled","job":"' .. id .. '"}')
  finished(fin, 1, {reason = reason})
else
  finish_row(row, keep_payload, zero_priority,
    {'state', 'completed', 'result', result, 'finished_at', fin.now_arg})
  redis.call('PUBLISH', base .. 'events', '{"event":"completed","job":"' .. id .. '"}')
  finished(fin, 1, {result = result})
end
return 1
