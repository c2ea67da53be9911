--[[
  Cancel a job by id in one atomic step (the lifecycle design's request, docs/runtime.md,
  without its read-then-act gap):
  a waiting job is removed, an active one is signalled, a finished one is refused.
  KEYS  1 row        HASH    the job
        2 lock       STRING  the optional operator lock (emq:{q}:job:<id>:lock)
        3 logs       LIST    the job's log lines
        4 pending    ZSET    ready ids
        5 schedule   ZSET    delayed ids
  ARGV  1 id   2 queue base (emq:{q}:)   3 '1' = a reason is given   4 the reason
  Returns  'removed' (pending | scheduled: the row, its logs and its set entry deleted,
           and a dedup key it still holds released by finished, as for remove_job)
           'signalled' (active: the cancel flag is on the row, the event published)
           -1 no row (nothing written)
  Errors   EMQLOCKED  a waiting job under an operator lock (nothing written)
           EMQSTATE not cancellable  the job is completed or dead (nothing written)
  Events   removed {job, reason} (a waiting job) | cancel {job, reason} (an active job),
           also on the workers' channel (emq:{q}:control), where the workers listen
  Moves    pending | scheduled -> (none)
  Bound    O(log N): two ZREMs and a fixed number of row commands (a removed job's
           log lines are deleted with it: O(lines)); a removed job finishes as cancelled
           (include/finished.lua: its completions entry and counters; no row is kept)
  The checks read the row once (state, lock field, the flag), then the lock key; every
  check comes before the first write. An active job's flag is `cancel_requested` (server
  ms) and `cancel_reason` (when a reason is given): extend_locks answers 'cancel' for a
  flagged job, so a worker that missed the event stops it at its next lease checkpoint.
  A repeated request on an active job writes nothing: it publishes the event again with
  the first request's reason (the first reason wins, as with CancelToken).
]]
local row, lock, logs, pending, schedule = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local id, base = ARGV[1], ARGV[2]
local reason = cjson.null
if ARGV[3] == '1' then reason = ARGV[4] end
-- @include time
-- @include finished

-- checks, in order: row, state (waiting: the lock), all before the first write
local f = redis.call('HMGET', row, 'state', 'lock', 'cancel_requested', 'cancel_reason')
local state = f[1]
if not state then return -1 end
local waiting = state == 'pending' or state == 'scheduled'
if waiting and (f[2] or redis.call('EXISTS', lock) == 1) then
  return redis.error_reply('EMQLOCKED job is locked: ' .. id)
end
if not waiting and state ~= 'active' then
  return redis.error_reply('EMQSTATE not cancellable: the job is ' .. state)
end

local channel = base .. 'events'
if waiting then
  local fin = finish_read(base, nil, now_ms(), {{id, 'cancelled'}})
  redis.call('ZREM', pending, id)
  redis.call('ZREM', schedule, id)
  redis.call('DEL', row, logs)
  redis.call('PUBLISH', channel, cjson.encode({event = 'removed', job = id, reason = reason}))
  finished(fin, 1, {reason = ARGV[3] == '1' and ARGV[4] or ''})
  return 'removed'
end
if f[3] then
  -- a repeat: the first request's reason stands; only the event goes out again
  reason = f[4] or cjson.null
else
  local now = now_ms()
  if ARGV[3] == '1' then
    redis.call('HSET', row, 'cancel_requested', now, 'cancel_reason', ARGV[4])
  else
    redis.call('HSET', row, 'cancel_requested', now)
  end
end
local event = cjson.encode({event = 'cancel', job = id, reason = reason})
redis.call('PUBLISH', channel, event)
redis.call('PUBLISH', base .. 'control', event)
return 'signalled'
