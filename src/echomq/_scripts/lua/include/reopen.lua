-- reopen_read / reopen: a flow child runs again (reprocess_job of a dead child; a `reopen`
-- entry relayed from another queue's outbox, flow_notify), so its parent waits for it
-- again (docs/flows.md, "Operator verbs" and "Across queues"). Two calls, because a script
-- reads every key it touches before its first write (docs/lua.md, rule 1):
--   local up = reopen_read(base, child, parent)  -- with the reads; `parent` on this queue
--   ... the script's own writes ...
--   reopen(base, up)
-- Up the tree from `parent`: a parent that has `child`'s outcome and is waiting, pending
-- (the failure made it ready, policy fail, not yet claimed) or dead (it failed on it)
-- loses that outcome (`open` + 1, `failed` - 1 for a failure) and waits again; a dead
-- parent's own parent is re-opened the same way, at most FLOW_MAX_DEPTH levels per call.
-- A parent already running or completed is left alone (the child runs again by itself);
-- up.steps is then empty. A dead parent whose own parent is on another queue cannot write
-- it (another slot): reopen_out gives it its next generation (`gen` on its row) and writes
-- an entry `reopen` on this queue's outbox carrying it (flow_notify on that queue re-opens
-- it there, once per generation).
-- @include time
-- @include lanes
-- @include ready
-- @include finished
local FLOW_MAX_DEPTH = 32
local function reopen_read(base, child, parent)
  local up = {steps = {}, out = false}
  while parent and #up.steps < FLOW_MAX_DEPTH do
    local prow = base .. 'job:' .. parent
    local p = redis.call('HMGET', prow, 'state', 'parent', 'group', 'parent_queue')
    local mark = redis.call('HGET', prow .. ':results', child)
    if not p[1] or not mark then break end
    if p[1] ~= 'waiting' and p[1] ~= 'pending' and p[1] ~= 'dead' then break end
    redis.call('EXISTS', prow .. ':children', prow .. ':remote', prow .. ':logs',
      base .. 'waiting', base .. 'pending', base .. 'dead')
    if p[3] then lanes_touch(base, p[3]) end
    up.steps[#up.steps + 1] = {row = prow, id = parent, child = child,
      failure = mark:sub(1, 1) ~= 'c', state = p[1], group = p[3]}
    if p[1] ~= 'dead' then break end
    if p[4] and p[2] then  -- its parent on another queue: told through the outbox
      redis.call('EXISTS', base .. 'outbox')
      up.out = {row = prow, id = parent, queue = p[4], parent = p[2]}
      break
    end
    child, parent = parent, p[2]
  end
  return up
end
local function reopen_out(base, row, parent_queue, parent, id)
  -- `id` (its row `row`) runs again and its parent is on another queue: its next
  -- generation, in a `reopen` entry on this queue's outbox (read: EXISTS outbox first)
  local gen = redis.call('HINCRBY', row, 'gen', 1)
  flow_outbox(base, parent_queue, parent, id, 'reopen', '', gen)
end
local function reopen(base, up)
  local now = now_ms()
  local channel = base .. 'events'
  for _, p in ipairs(up.steps) do
    redis.call('HDEL', p.row .. ':results', p.child)
    redis.call('HINCRBY', p.row, 'open', 1)
    if p.failure then redis.call('HINCRBY', p.row, 'failed', -1) end
    if p.state ~= 'waiting' then
      leave_ready(base, base .. 'pending', p.id, p.group)
      redis.call('ZREM', base .. 'dead', p.id)
      for _, key in ipairs({p.row, p.row .. ':children', p.row .. ':results',
          p.row .. ':remote', p.row .. ':logs'}) do
        redis.call('PERSIST', key)
      end
      redis.call('HDEL', p.row, 'last_error', 'finished_at')
      redis.call('HSET', p.row, 'state', 'waiting')
      redis.call('ZADD', base .. 'waiting', now, p.id)
      redis.call('PUBLISH', channel, '{"event":"waiting","job":"' .. p.id .. '"}')
    end
  end
  if up.out then reopen_out(base, up.out.row, up.out.queue, up.out.parent, up.out.id) end
end
