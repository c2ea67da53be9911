--[[
  Fence the cancels whose grace ran out: each due job is settled cancelled and its token
  bumped, so the attempt that did not stop can never complete, fail or extend (it answers
  stale). Every worker runs this with its heartbeat, so a due cancel is fenced within one
  heartbeat of its deadline whatever its holder does (blocked, gone, or ignoring it).
  KEYS  1 cancels    ZSET  active cancels with a grace; score = the fence deadline ms
        2 active     ZSET  claimed ids
        3 pending    ZSET  ready ids
        4 schedule   ZSET  delayed ids
        derived from the base (the queue's slot; include/finished.lua): job:<id>,
        cancelled, completions, metrics:*
  ARGV  1 queue base (emq:{q}:)   2 limit (1..MAX_BATCH)
  Returns  the ids fenced now (a list; empty when nothing was due)
  Errors   EMQARG   limit is not 1..MAX_BATCH (nothing written; the verb refuses it first)
  Events   cancel {job, reason, fenced} (also on emq:{q}:control, the workers' channel) and
           cancelled {job, fenced} (per fenced job)
  Moves    active | pending | scheduled -> cancelled; cancelled -> (none) (the retention,
           other rows); waiting -> pending (a flow parent: its child finished, docs/flows.md)
  Bound    O(limit * log N); at most MAX_BATCH due entries per call (include/caps.lua:
           each may finish a job), plus the retention's cleanup (include/finished.lua: at most
           100 index entries and 100 capped rows per call)
  Per due entry (deadline <= server now), read first: the row's state, reason and deadline.
  Then: a job that finished (completed, cancelled, dead, expired), has no row, or no deadline (reprocessed)
  only leaves `cancels`; a row whose deadline moved later is re-scored; the rest (active,
  or waiting again after a hand-back or a retry) are fenced (include/fence.lua): a grouped
  one gives back its group's slot or its lane place (leave_active / leave_ready, their
  lane keys touched in the read phase; docs/lanes.md).
]]
local cancels, active, pending, schedule = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local base = ARGV[1]
-- @include caps
-- @include time
-- @include lanes
-- @include finished
-- @include fence
local limit = tonumber(ARGV[2])
if not limit or limit < 1 or limit > MAX_BATCH then
  return redis.error_reply('EMQARG fence_cancels limit must be 1..' .. MAX_BATCH)
end
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', cancels, '-inf', now, 'LIMIT', 0, limit)
if #due == 0 then return {} end
-- reads first: each row's state, reason, deadline and group
local rows = {}
for i, id in ipairs(due) do
  rows[i] = redis.call('HMGET', base .. 'job:' .. id, 'state', 'cancel_reason',
    'cancel_deadline', 'group')
end
local k = {base = base, active = active, pending = pending, schedule = schedule,
  cancels = cancels, events = base .. 'events', control = base .. 'control'}
local due_fence, stale = {}, {}
for i, id in ipairs(due) do
  local state, reason, deadline = rows[i][1], rows[i][2], tonumber(rows[i][3] or '')
  if not state or state == 'completed' or state == 'cancelled' or state == 'dead'
    or state == 'expired' or not deadline then
    stale[#stale + 1] = {id}
  elseif deadline > now then
    stale[#stale + 1] = {id, deadline}
  else
    due_fence[#due_fence + 1] = {id, state, reason, rows[i][4]}
    if rows[i][4] then lanes_touch(base, rows[i][4]) end  -- a read: the lane keys
  end
end
local jobs = {}
for i, d in ipairs(due_fence) do jobs[i] = {d[1], 'cancelled'} end
local fin = nil
if #jobs > 0 then fin = finish_read(base, 'cancelled', now, jobs) end  -- reads, then writes
for _, e in ipairs(stale) do
  if e[2] then redis.call('ZADD', cancels, e[2], e[1]) else redis.call('ZREM', cancels, e[1]) end
end
local fenced = {}
for i, d in ipairs(due_fence) do
  fence_cancel(k, fin, i, base .. 'job:' .. d[1], d[1], d[2], d[4], d[3], now)
  fenced[#fenced + 1] = d[1]
end
return fenced
