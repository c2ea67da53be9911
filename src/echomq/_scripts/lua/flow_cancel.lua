--[[
  Cancel or remove one page of a flow's subtree on this queue (docs/flows.md "Cancelling
  and removing a flow"), atomically: the page's waiting jobs (pending, scheduled, waiting)
  are removed, so none of them can be claimed; its running jobs are answered (to be
  signalled by a later call) or, with `signal`, signalled now. A flow bigger than a page,
  or on several queues, holds each queue's claims while its pages run (`hold`), and its
  last call there releases the hold.
  KEYS  1 pending   ZSET    ready ids
        2 schedule  ZSET    delayed ids
        3 active    ZSET    claimed ids
        4 waiting   ZSET    flow parents with open children
        5 cancels   ZSET    active cancels with a grace
        6 meta      HASH    `hold` = the claim hold's end, server ms (claim reads it)
        7 wake      LIST    wake tokens for idle consumers
        8 holds     ZSET    the claim holds taken; member = a hold's token, score = its end
        derived from the base (the queue's slot; include/finished.lua): dead, completed,
        cancelled, completions, outbox, metrics:*, each job's row, lock, logs, children, results,
        remote
  ARGV  1 queue base (emq:{q}:)   2 mode (cancel | remove)   3 hold (take: hold the
        queue's claims until now + 5 | release: end the hold after this page | '' none)
        4 the hold's token   5 the hold's length, ms   6 '1' = signal the running jobs now
        7 '1' = a reason is given   8 the reason   9 the subtree's top id (the one job whose
        parent, outside the subtree, is told; '' = none in this call)   10 the number of
        ids n (0..MAX_FLOW)   then n ids
  Returns  {removed, locked, running, top} where removed counts the jobs removed, locked
           the waiting (cancel) or any (remove) jobs left under an operator lock, running
           the ids of the running jobs not signalled (cancel without `signal`; signalled
           ones are counted in removed's place: see below), and top the top job's state
           before this call ('' when the top is not in the call) | -1 the top has no row
           (nothing written)
           With `signal`, removed counts the removed and the signalled jobs together.
  Errors   EMQARG        a bad mode, hold step, count or argument count
           EMQLOCKED     remove: the top job is locked (nothing written)
  Events   removed {job, reason} (each removed job) | cancel {job, reason} (each running
           job signalled; also on emq:{q}:control)
  Moves    pending | scheduled | active | dead | completed | cancelled | waiting
           | expired -> (none);
           waiting -> pending (the top's parent, docs/flows.md)
  Bound    O(n * log N) (at most MAX_FLOW ids per call, include/caps.lua), plus the removed
           jobs' log lines (deleted with them)
  The hold is a claim gate, as `paused` is: claim answers no job, and the ms until the hold
  ends, while meta `hold` is in the future. It lapses by itself (a canceller that died
  holds the queue for at most the hold's length); a release recomputes it from the holds
  left (several cancels may hold a queue at once) and wakes the idle consumers.
  cancel: a waiting job finishes as cancelled while it waits (as cancel.lua: its
  completions entry and counter, no row kept); a running one gets the cancel flag
  (`cancel_requested`, `cancel_reason`, the first reason stands) and the event; a finished
  one is left. remove: every job goes, running ones too (their holder answers gone at its
  next checkpoint), as remove_job with force.
  Only the top tells its parent (its own parent is outside the subtree): the other jobs'
  parents are in the subtree, removed in this call or another, and are not written.
  Every check comes before the first write.
]]
-- @include caps
-- @include time
-- @include wake
-- @include lanes
-- @include ready
-- @include leave_active
-- @include finished
local pending, schedule, active, waiting_set = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local cancels, meta, wake, holds = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local base, mode, hold, token = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local hold_ms, signal = tonumber(ARGV[5]), ARGV[6] == '1'
local has_reason, top = ARGV[7] == '1', ARGV[9]
local n = tonumber(ARGV[10])
if (mode ~= 'cancel' and mode ~= 'remove') or (hold ~= '' and hold ~= 'take' and hold ~= 'release')
    or not hold_ms or hold_ms < 0 or hold_ms > MAX_MS
    or not n or n < 0 or n > MAX_FLOW or #ARGV ~= 10 + n then
  return redis.error_reply('EMQARG flow_cancel takes a mode, a hold step and 0..' .. MAX_FLOW
    .. ' ids')
end
local reason = cjson.null
if has_reason then reason = ARGV[8] end
local now = now_ms()

-- reads: every row (state, lock, the cancel flag, group, parent), every lock key
local remove, running, locked, top_state = {}, {}, 0, ''
local parents = {}
local seen = {}
for k = 11, 10 + n do
  local id = ARGV[k]
  local row = base .. 'job:' .. id
  local f = redis.call('HMGET', row, 'state', 'lock', 'cancel_requested', 'cancel_reason',
    'group', 'parent', 'parent_queue', 'gen')
  local state = f[1]
  if id == top then
    if not state then return -1 end
    top_state = state
  end
  if state and not seen[id] then
    seen[id] = true
    local is_locked = f[2] or redis.call('EXISTS', base .. 'job:' .. id .. ':lock') == 1
    local waiting = state == 'pending' or state == 'scheduled' or state == 'waiting'
    local job = {id = id, row = row, state = state, group = f[5], flagged = f[3],
      first_reason = f[4]}
    if mode == 'remove' then
      if is_locked then
        if id == top then return redis.error_reply('EMQLOCKED job is locked: ' .. id) end
        locked = locked + 1
      else
        remove[#remove + 1] = job
      end
    elseif waiting then
      if is_locked then locked = locked + 1 else remove[#remove + 1] = job end
    elseif state == 'active' then
      running[#running + 1] = job
    end
    if job.group and (mode == 'remove' or waiting) then lanes_touch(base, job.group) end
    if mode == 'remove' then
      job.dedup = held_dedup(base, row, id)
      job.in_flight = redis.call('ZSCORE', active, id)
      local live = state ~= 'completed' and state ~= 'dead' and state ~= 'cancelled'
        and state ~= 'expired'
      if id == top and f[6] and live and f[7] then  -- its parent on another queue: the outbox
        redis.call('EXISTS', base .. 'outbox')
        job.parent = {base = base, queue = f[7], id = f[6], gen = f[8]}
      elseif id == top and f[6] and live then
        job.parent = {base = base, record = flow_read(base, parents, f[6])}
      end
    end
    redis.call('EXISTS', row .. ':children', row .. ':results', row .. ':remote', row .. ':logs')
  end
end
local fin = nil
if mode == 'cancel' and #remove > 0 then
  local list = {}
  for i, job in ipairs(remove) do list[i] = {job.id, 'cancelled'} end
  fin = finish_read(base, nil, now, list)
  for _, rec in ipairs(fin.jobs) do
    if rec.id ~= top then rec.parent, rec.p, rec.parent_queue = nil, nil, nil end
  end
end
redis.call('EXISTS', base .. 'dead', base .. 'completed', base .. 'cancelled', base .. 'control',
  base .. 'events')
if hold ~= '' then
  redis.call('ZRANGE', holds, 0, -1)
  redis.call('HGET', meta, 'hold')
  redis.call('LLEN', wake)
end

-- writes: the hold first (nothing of the queue is claimed while the pages run), then the
-- waiting jobs out, then the running ones signalled
if hold == 'take' then
  redis.call('ZADD', holds, now + hold_ms, token)
end
local channel = base .. 'events'
for i, job in ipairs(remove) do
  local id, row = job.id, job.row
  leave_ready(base, pending, id, job.group)
  if job.in_flight then leave_active(base, active, id, job.group) end
  redis.call('ZREM', schedule, id)
  redis.call('ZREM', cancels, id)
  redis.call('ZREM', waiting_set, id)
  if mode == 'remove' then
    redis.call('ZREM', base .. 'dead', id)
    redis.call('ZREM', base .. 'completed', id)
    redis.call('ZREM', base .. 'cancelled', id)
  end
  redis.call('DEL', row, row .. ':logs', row .. ':children', row .. ':results', row .. ':remote')
  if mode == 'remove' then
    redis.call('PUBLISH', channel, cjson.encode({event = 'removed', job = id}))
    finished(nil, job.dedup, {parent = job.parent, id = id})
  else
    redis.call('PUBLISH', channel, cjson.encode({event = 'removed', job = id, reason = reason}))
    finished(fin, i, {reason = has_reason and ARGV[8] or ''})
  end
end
local answer = {}
for _, job in ipairs(running) do
  if signal then
    local said = reason
    if job.flagged then
      said = job.first_reason or cjson.null  -- a repeat: the first request's reason stands
    elseif has_reason then
      redis.call('HSET', job.row, 'cancel_requested', now, 'cancel_reason', ARGV[8])
    else
      redis.call('HSET', job.row, 'cancel_requested', now)
    end
    local event = cjson.encode({event = 'cancel', job = job.id, reason = said})
    redis.call('PUBLISH', channel, event)
    redis.call('PUBLISH', base .. 'control', event)
  else
    answer[#answer + 1] = job.id
  end
end
if hold ~= '' then
  local released = hold == 'release' and redis.call('ZREM', holds, token) == 1
  redis.call('ZREMRANGEBYSCORE', holds, '-inf', now)
  local last = redis.call('ZRANGE', holds, -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('HSET', meta, 'hold', last[2])
  else
    redis.call('HDEL', meta, 'hold')
  end
  if released then push_wake(wake, 1) end  -- (a release of no hold of ours writes nothing)
end
local done = #remove
if signal then done = done + #running end
return {done, locked, answer, top_state}
