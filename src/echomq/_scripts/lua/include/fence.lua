-- fence_cancel(k, fin, i, row, id, state, group, reason, now): a cancel whose grace ran
-- out. The job is settled cancelled and its attempt fenced: the token (the row's
-- `token`) grows by one, so a holder that did not stop can no longer complete, fail or
-- extend it (its calls answer stale). The job leaves the structure that holds it by
-- `state`: active through `leave_active` (a grouped job gives back its group's slot),
-- pending through `leave_ready` (the flat set or its group's lane), scheduled k.schedule;
-- and its entry in k.cancels. `group` is the row's `group` field (nil: ungrouped; the
-- caller ran lanes_touch(k.base, group) in its read phase). It ends in state `cancelled`
-- like a cooperative cancel (its reason in `cancel_reason`), with `cancel_fenced` = now
-- on the row, and finishes as `cancelled` through include/finished.lua (fin: the
-- caller's finish_read with kept = 'cancelled', job i: its completions entry, counters
-- and retention). The events: `cancel` with fenced = true (its holder stops it hard; on
-- k.events and on the workers' channel k.control), then `cancelled`. Reads nothing: call it after the
-- script's checks and finish_read.
-- @include ready
-- @include leave_active
-- @include finished
local function fence_cancel(k, fin, i, row, id, state, group, reason, now)
  if state == 'active' then leave_active(k.base, k.active, id, group)
  elseif state == 'pending' then leave_ready(k.base, k.pending, id, group)
  elseif state == 'scheduled' then redis.call('ZREM', k.schedule, id) end
  redis.call('HINCRBY', row, 'token', 1)
  redis.call('HSET', row, 'state', 'cancelled', 'cancel_reason', reason or '',
    'finished_at', now, 'cancel_fenced', now)
  redis.call('HDEL', row, 'cancel_deadline')
  redis.call('ZREM', k.cancels, id)
  local stop = cjson.encode({event = 'cancel', job = id, reason = reason or cjson.null,
    fenced = true})
  redis.call('PUBLISH', k.events, stop)
  redis.call('PUBLISH', k.control, stop)
  redis.call('PUBLISH', k.events, '{"event":"cancelled","job":"' .. id .. '","fenced":true}')
  finished(fin, i, {reason = reason or ''})
end
