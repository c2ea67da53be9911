--[[
  Remove a job from whichever state set holds it, with its row and its logs; a dedup key
  it still holds is released (seed 004: a removed job gives its dedup key back).
  KEYS  1 row        HASH    the job
        2 lock       STRING  the optional operator lock (emq:{q}:job:<id>:lock)
        3 logs       LIST    the job's log lines
        4 pending    ZSET
        5 schedule   ZSET
        6 active     ZSET
        7 dead       ZSET
        8 completed  ZSET
  ARGV  1 id   2 queue base (emq:{q}:)
  Returns  1 | -1 no row (nothing written)
  Errors   EMQLOCKED   a lock key or a `lock` field on the row: the job is untouched
  Events   removed
  Moves    pending | scheduled | active | dead | completed -> (none)
  Bound    O(log N), plus the job's log lines (deleted with it)
  Removal is not an outcome: no completions entry, no counter; finished's hook releases
  the dedup key the job held (docs/repeat.md). A grouped job leaves its lane
  (`leave_ready`) or, in flight, gives back its group's active slot (`leave_active`;
  docs/lanes.md).
]]
local row, lock, logs = KEYS[1], KEYS[2], KEYS[3]
local id, base = ARGV[1], ARGV[2]
-- @include wake
-- @include lanes
-- @include ready
-- @include leave_active
-- @include finished
-- checks, in order: row, lock
if redis.call('EXISTS', row) == 0 then return -1 end
if redis.call('EXISTS', lock) == 1 or redis.call('HEXISTS', row, 'lock') == 1 then
  return redis.error_reply('EMQLOCKED job is locked: ' .. id)
end
local held = held_dedup(base, row, id)  -- the dedup key it gives back (finished's hook)
local group = redis.call('HGET', row, 'group')
if group then lanes_touch(base, group) end
local in_flight = redis.call('ZSCORE', KEYS[6], id)

leave_ready(base, KEYS[4], id, group)
if in_flight then leave_active(base, KEYS[6], id, group) end
for _, i in ipairs({5, 7, 8}) do redis.call('ZREM', KEYS[i], id) end
redis.call('DEL', row, logs)
redis.call('PUBLISH', base .. 'events', cjson.encode({event = 'removed', job = id}))
finished(nil, held, 'removed')
return 1
