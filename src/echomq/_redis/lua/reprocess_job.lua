--[[
  Reprocess a dead job: back to pending, first in its priority band. The counters
  (attempts, failures, stalled) stay; last_error and a cancel request left on the row
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
  Events   reprocessed; waiting (a flow parent whose wait re-opens)
  Moves    dead -> pending | waiting; pending -> waiting
  Bound    O(depth * log N): the job, and at most 32 flow ancestors re-opened
  The row and its logs lose the TTL of the dead retention (PERSIST): the job is live again.
  A grouped job goes back to the front of its lane (`ready`; docs/lanes.md).
  A flow child (docs/flows.md) re-opens its parent's wait: its outcome leaves the parent's
  results, the parent's `open` grows by one (`failed` drops for a failure), and a parent
  that the failure had made pending (policy fail, not yet claimed) or dead (it failed on
  it) waits again; a dead parent's own parent is re-opened the same way, up the tree. A
  parent already running or completed is left alone (the child runs again by itself).
]]
local row, dead, pending, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id, base = ARGV[1], ARGV[2]
local MAX_DEPTH = 32
-- @include time
-- @include score
-- @include wake
-- @include lanes
-- @include ready
-- checks, in order: row, dead membership
local f = redis.call('HMGET', row, 'priority', 'group', 'parent')
redis.call('EXISTS', KEYS[5])  -- read before the first write (docs/lua.md, rule 1)
if redis.call('EXISTS', row) == 0 then return -1 end
if not redis.call('ZSCORE', dead, id) then
  return redis.error_reply('EMQSTATE not dead: ' .. id)
end
if f[2] then lanes_touch(base, f[2]) end
-- the ancestors to re-open, read before any write: {row, id, child, mark, state, group}
local reopen = {}
local child, parent = id, f[3]
while parent and #reopen < MAX_DEPTH do
  local prow = base .. 'job:' .. parent
  local p = redis.call('HMGET', prow, 'state', 'parent', 'group')
  local mark = redis.call('HGET', prow .. ':results', child)
  if not p[1] or not mark then break end
  if p[1] ~= 'waiting' and p[1] ~= 'pending' and p[1] ~= 'dead' then break end
  redis.call('EXISTS', prow .. ':children', prow .. ':remote', prow .. ':logs', base .. 'waiting')
  if p[3] then lanes_touch(base, p[3]) end
  reopen[#reopen + 1] = {row = prow, id = parent, child = child, failure = mark:sub(1, 1) ~= 'c',
    state = p[1], group = p[3]}
  if p[1] ~= 'dead' then break end
  child, parent = parent, p[2]
end

redis.call('ZREM', dead, id)
redis.call('PERSIST', row)
redis.call('PERSIST', KEYS[5])
redis.call('HDEL', row, 'last_error', 'finished_at', 'cancel_requested', 'cancel_reason',
  'cancel_deadline', 'cancel_fenced')
redis.call('HSET', row, 'state', 'pending')
ready(base, pending, id, f[2], band_score(f[1] or '0', 0))
local channel = base .. 'events'
redis.call('PUBLISH', channel, cjson.encode({event = 'reprocessed', job = id}))
local now = now_ms()
for _, p in ipairs(reopen) do
  redis.call('HDEL', p.row .. ':results', p.child)
  redis.call('HINCRBY', p.row, 'open', 1)
  if p.failure then redis.call('HINCRBY', p.row, 'failed', -1) end
  if p.state ~= 'waiting' then
    leave_ready(base, pending, p.id, p.group)
    redis.call('ZREM', dead, p.id)
    for _, key in ipairs({p.row, p.row .. ':children', p.row .. ':results', p.row .. ':remote',
        p.row .. ':logs'}) do
      redis.call('PERSIST', key)
    end
    redis.call('HDEL', p.row, 'last_error', 'finished_at')
    redis.call('HSET', p.row, 'state', 'waiting')
    redis.call('ZADD', base .. 'waiting', now, p.id)
    redis.call('PUBLISH', channel, '{"event":"waiting","job":"' .. p.id .. '"}')
  end
end
return 1
