--[[
  Reprocess a dead job: back to pending, first in its priority band. The counters
  (token, failures, stalled) stay; last_error and a cancel request left on the row
  (cancel_requested, cancel_reason, cancel_deadline, cancel_fenced) are cleared:
  reprocessing asks for a fresh run (a stale entry in `cancels` is dropped by
  fence_cancels, which finds no deadline). The
  pause gate is not read: on a paused queue the job waits in pending until resume.
  KEYS  1 row       HASH  the job
        2 dead      ZSET  dead-lettered ids
        3 pending   ZSET  ready ids; score = -priority * 2^40 (+ seq for new jobs)
        4 wake      LIST  wake tokens
        5 logs      LIST  the job's log lines
  ARGV  1 id   2 queue base (emq:{q}:)
  Returns  1 | -1 no row (nothing written)
  Errors   EMQSTATE not dead   the id is not in the dead set (nothing written)
  Events   reprocessed; waiting (a flow parent whose wait re-opens); outbox on the
           workers' channel (a `reopen` entry for a parent on another queue)
  Moves    dead -> pending | waiting; pending -> waiting
  Bound    O(depth * log N): the job, and at most 32 flow ancestors re-opened
           (include/reopen.lua, FLOW_MAX_DEPTH)
  The row and its logs lose the TTL of the dead retention (PERSIST): the job is live again.
  A grouped job goes back to the front of its lane (`ready`; docs/lanes.md).
  A flow child (docs/flows.md) re-opens its parent's wait: its outcome leaves the parent's
  results, the parent's `open` grows by one (`failed` drops for a failure), and a parent
  that the failure had made pending (policy fail, not yet claimed) or dead (it failed on
  it) waits again; a dead parent's own parent is re-opened the same way, up the tree. A
  parent already running or completed is left alone (the child runs again by itself).
  A parent on another queue (the child's, or a dead ancestor's, `parent_queue`) cannot be
  written here (another slot): the job gets its next generation (`gen` on its row) and an
  entry `reopen` on this queue's outbox carries it to flow_notify on the parent's queue
  (docs/flows.md "Across queues"); its nudge is published on emq:{q}:control.
]]
local row, dead, pending, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id, base = ARGV[1], ARGV[2]
-- @include score
-- @include lanes
-- @include ready
-- @include reopen
-- checks, in order: row, dead membership
local f = redis.call('HMGET', row, 'priority', 'group', 'parent', 'parent_queue')
redis.call('EXISTS', KEYS[5])  -- read before the first write (docs/lua.md, rule 1)
if redis.call('EXISTS', row) == 0 then return -1 end
if not redis.call('ZSCORE', dead, id) then
  return redis.error_reply('EMQSTATE not dead: ' .. id)
end
if f[2] then lanes_touch(base, f[2]) end
-- the ancestors to re-open, read before any write (a parent on another queue: the outbox)
local up = {steps = {}, out = false}
if f[3] and f[4] then
  redis.call('EXISTS', base .. 'outbox')
elseif f[3] then
  up = reopen_read(base, id, f[3])
end

redis.call('ZREM', dead, id)
redis.call('PERSIST', row)
redis.call('PERSIST', KEYS[5])
redis.call('HDEL', row, 'last_error', 'finished_at', 'cancel_requested', 'cancel_reason',
  'cancel_deadline', 'cancel_fenced')
redis.call('HSET', row, 'state', 'pending')
ready(base, pending, id, f[2], band_score(f[1] or '0', 0))
redis.call('PUBLISH', base .. 'events', cjson.encode({event = 'reprocessed', job = id}))
if f[3] and f[4] then reopen_out(base, row, f[4], f[3], id) end
reopen(base, up)
return 1
