--[[
  Cancel a job by id in one atomic step (the lifecycle design's request, docs/runtime.md,
  without its read-then-act gap):
  a waiting job is removed, an active one is signalled (and, with a grace, fenced when it
  runs out), a finished one is refused.
  A flow parent that waits for its children (`waiting`) is removed like a pending job, with
  its children list and their results; `flows.cancel_flow` then cancels its open
  children (docs/flows.md).
  KEYS  1 row        HASH    the job
        2 lock       STRING  the optional operator lock (emq:{q}:job:<id>:lock)
        3 logs       LIST    the job's log lines
        4 pending    ZSET    ready ids
        5 schedule   ZSET    delayed ids
        6 active     ZSET    claimed ids
        7 cancels    ZSET    active cancels with a grace; score = the fence deadline ms
        8 waiting    ZSET    flow parents with open children
        derived from the base (the queue's slot; include/finished.lua): cancelled,
        completions, metrics:*
  ARGV  1 id   2 queue base (emq:{q}:)   3 '1' = a reason is given   4 the reason
        5 grace ms (-1: none, the cancel stays cooperative)
  Returns  'removed' (pending | scheduled | waiting: the row, its logs and its set entry
           deleted, and a dedup key it still holds released by finished, as for remove_job)
           'signalled' (active: the cancel flag is on the row, the event published)
           'fenced' (active, grace 0 or a deadline already passed: settled cancelled now,
           its token bumped) | -1 no row (nothing written)
  Errors   EMQLOCKED  a waiting job under an operator lock (nothing written)
           EMQSTATE not cancellable  the job is completed, cancelled or dead (nothing
                                     written)
  Events   removed {job, reason} (a waiting job) | cancel {job, reason, grace_ms} (an
           active job) | cancel {job, reason, fenced} and cancelled {job, fenced} (fenced);
           each cancel also on the workers' channel (emq:{q}:control), where they listen
  Moves    pending | scheduled | waiting -> (none); active -> cancelled; cancelled ->
           (none) (the retention of a fenced job's set, other rows); waiting -> pending
           (its flow parent, docs/flows.md)
  Bound    O(log N): a fixed number of set and row commands (a removed job's log lines
           are deleted with it: O(lines)), plus the retention's cleanup of a fenced job
           (include/finished.lua: at most 100 index entries and 100 capped rows). A
           removed job finishes as cancelled (its completions entry and counters; no row
           is kept); a fenced one too, its row kept in `cancelled` for keep_result
  The checks read the row once (state, lock field, the flag, the deadline, the group), then
  the lock key; every check comes before the first write (finish_read's reads and
  lanes_touch too). An active job's flag is `cancel_requested` (server ms) and
  `cancel_reason` (when a reason is given): extend_locks answers 'cancel' for a flagged
  job, so a worker that missed the event stops it at its next lease checkpoint. A grace
  sets `cancel_deadline` = now + grace and the entry in `cancels` (a repeat may move the
  deadline sooner, never later); when it passes, fence_cancels (run by every worker's
  heartbeat) fences the attempt. A repeated request changes nothing else: it publishes the
  event again with the first request's reason.
  A waiting grouped job leaves its lane (`leave_ready`); a fenced grouped job gives back
  its group's slot (`leave_active`, include/fence.lua; docs/lanes.md).
]]
local row, lock, logs, pending, schedule = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local active, cancels, waiting_set = KEYS[6], KEYS[7], KEYS[8]
local id, base = ARGV[1], ARGV[2]
local grace = tonumber(ARGV[5])
local reason = cjson.null
if ARGV[3] == '1' then reason = ARGV[4] end
-- @include time
-- @include lanes
-- @include ready
-- @include finished
-- @include fence

-- checks, in order: row, state (waiting: the lock), all before the first write
local f = redis.call('HMGET', row, 'state', 'lock', 'cancel_requested', 'cancel_reason',
  'cancel_deadline', 'group')
local group = f[6]
local state = f[1]
if not state then return -1 end
local waiting = state == 'pending' or state == 'scheduled' or state == 'waiting'
if waiting and (f[2] or redis.call('EXISTS', lock) == 1) then
  return redis.error_reply('EMQLOCKED job is locked: ' .. id)
end
if not waiting and state ~= 'active' then
  return redis.error_reply('EMQSTATE not cancellable: the job is ' .. state)
end

local channel = base .. 'events'
if waiting and group then lanes_touch(base, group) end
if waiting then
  local fin = finish_read(base, nil, now_ms(), {{id, 'cancelled'}})
  redis.call('EXISTS', row .. ':children', row .. ':results', row .. ':remote')
  leave_ready(base, pending, id, group)
  redis.call('ZREM', schedule, id)
  redis.call('ZREM', cancels, id)
  redis.call('ZREM', waiting_set, id)
  redis.call('DEL', row, logs, row .. ':children', row .. ':results', row .. ':remote')
  redis.call('PUBLISH', channel, cjson.encode({event = 'removed', job = id, reason = reason}))
  finished(fin, 1, {reason = ARGV[3] == '1' and ARGV[4] or ''})
  return 'removed'
end
local now = now_ms()
if f[3] then
  reason = f[4] or cjson.null  -- a repeat: the first request's reason stands
end
local deadline = f[5] and tonumber(f[5])
local moved = false
if grace >= 0 and (not deadline or now + grace < deadline) then
  deadline, moved = now + grace, true
end
if deadline and deadline <= now then
  if group then lanes_touch(base, group) end
  local fin = finish_read(base, 'cancelled', now, {{id, 'cancelled'}})
  if not f[3] then redis.call('HSET', row, 'cancel_requested', now) end
  local text = reason
  if text == cjson.null then text = nil end
  if ARGV[3] == '1' and not f[3] then redis.call('HSET', row, 'cancel_reason', ARGV[4]) end
  local k = {base = base, active = active, pending = pending, schedule = schedule,
    cancels = cancels, events = channel, control = base .. 'control'}
  fence_cancel(k, fin, 1, row, id, state, group, text, now)
  return 'fenced'
end
if not f[3] then
  if ARGV[3] == '1' then
    redis.call('HSET', row, 'cancel_requested', now, 'cancel_reason', ARGV[4])
  else
    redis.call('HSET', row, 'cancel_requested', now)
  end
end
if moved then
  redis.call('HSET', row, 'cancel_deadline', deadline)
  redis.call('ZADD', cancels, deadline, id)
end
local event = {event = 'cancel', job = id, reason = reason}
if deadline then event.grace_ms = deadline - now end
event = cjson.encode(event)
redis.call('PUBLISH', channel, event)
redis.call('PUBLISH', base .. 'control', event)
return 'signalled'
