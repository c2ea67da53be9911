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
        9 waiting    ZSET    flow parents with open children
        derived from the base: cancelled (ZSET, cancelled rows kept), outbox, the lanes
  ARGV  1 id   2 queue base (emq:{q}:)   3 '1' = force (a flow parent with open children)
  Returns  1 | -1 no row (nothing written)
  Errors   EMQLOCKED   a lock key or a `lock` field on the row: the job is untouched
           EMQSTATE has open children   a waiting flow parent, not forced (untouched)
  Events   removed
  Moves    pending | scheduled | active | dead | completed | cancelled | waiting
           | expired -> (none);
           waiting -> pending (its flow parent, docs/flows.md)
  Bound    O(log N), plus the job's log lines (deleted with it)
  Removal is not an outcome: no completions entry, no counter; finished's hook releases
  the dedup key the job held (docs/repeat.md) and tells a live flow child's parent it is
  gone (`r`: counted as a failure by the parent's policy, docs/flows.md), so the parent
  does not wait for it forever (a parent on another queue: an entry on this queue's outbox,
  emq:{q}:outbox, relayed by the sweeper). A flow parent goes with its children list and
  results (force: `flows.remove_flow` removes its subtree).
]]
local row, lock, logs = KEYS[1], KEYS[2], KEYS[3]
local id, base, force = ARGV[1], ARGV[2], ARGV[3] == '1'
-- @include lanes
-- @include ready
-- @include leave_active
-- @include finished
-- checks, in order: row, lock
if redis.call('EXISTS', row) == 0 then return -1 end
if redis.call('EXISTS', lock) == 1 or redis.call('HEXISTS', row, 'lock') == 1 then
  return redis.error_reply('EMQLOCKED job is locked: ' .. id)
end
local f = redis.call('HMGET', row, 'state', 'open', 'parent', 'parent_queue', 'gen')
if f[1] == 'waiting' and tonumber(f[2] or '0') > 0 and not force then
  return redis.error_reply('EMQSTATE has open children: ' .. id .. ' (remove the flow with force)')
end
local parent = nil  -- a live child's parent: told that this child is gone
local live = f[1] ~= 'completed' and f[1] ~= 'dead' and f[1] ~= 'cancelled'
  and f[1] ~= 'expired'
if f[3] and live and f[4] then  -- its parent on another queue: told through the outbox
  redis.call('EXISTS', base .. 'outbox')
  parent = {base = base, queue = f[4], id = f[3], gen = f[5]}
elseif f[3] and live then
  parent = {base = base, record = flow_read(base, {}, f[3])}
end
redis.call('EXISTS', row .. ':children', row .. ':results', row .. ':remote')
local held = held_dedup(base, row, id)  -- the dedup key it gives back (finished's hook)
local group = redis.call('HGET', row, 'group')
if group then lanes_touch(base, group) end
local in_flight = redis.call('ZSCORE', KEYS[6], id)
local cancelled = base .. 'cancelled'
redis.call('EXISTS', cancelled)  -- read: a key moved mid-reshard fails here

leave_ready(base, KEYS[4], id, group)
if in_flight then leave_active(base, KEYS[6], id, group) end
for _, i in ipairs({5, 7, 8, 9}) do redis.call('ZREM', KEYS[i], id) end
redis.call('ZREM', cancelled, id)
redis.call('DEL', row, logs, row .. ':children', row .. ':results', row .. ':remote')
redis.call('PUBLISH', base .. 'events', cjson.encode({event = 'removed', job = id}))
finished(nil, held, {parent = parent, id = id})
return 1
