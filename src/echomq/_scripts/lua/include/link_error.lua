-- errback_read / errback_fire: a dying job's error callback (docs/flows.md "Error
-- callbacks"; the row field `errback`, whose layout _model/errback.py writes: seven lines,
-- queue, id, priority, max_attempts, task, keep_result, keep_dead, then the payload).
--   local eb = errback_read(base, spec)   -- in the read phase (nil: not a spec)
--   errback_fire(base, eb, id, error, now) -- once the job is dead
-- An errback on this queue is enqueued pending by the dying script itself, its payload
-- ERRBACK_MARK .. {"job","error"} .. '\n' .. the spec's payload (the worker passes the
-- two values first); one whose id has a row already (the job died before and its errback
-- stands) is not written again. An errback on another queue (another hash tag: a cluster
-- refuses its keys here) becomes one entry (kind errback) on this queue's outbox, with a
-- nudge on the workers' channel: the relay enqueues it there (flows.relay_outbox), so it
-- is lost neither way.
-- @include wake
-- @include score
local ERRBACK_MARK = '\0emq-errback\0'
local function errback_read(base, spec)
  local f, pos = {}, 1
  for k = 1, 7 do
    local nl = string.find(spec, '\n', pos, true)
    if not nl then return nil end
    f[k] = string.sub(spec, pos, nl - 1)
    pos = nl + 1
  end
  local eb = {queue = f[1], id = f[2], priority = f[3], max_attempts = f[4], task = f[5],
    keep_result = f[6], keep_dead = f[7], payload = string.sub(spec, pos), spec = spec}
  eb.here = 'emq:{' .. f[1] .. '}:' == base
  if eb.here then
    eb.exists = redis.call('EXISTS', base .. 'job:' .. eb.id) == 1
    redis.call('EXISTS', base .. 'pending', base .. 'meta', base .. 'wake')
  else
    redis.call('EXISTS', base .. 'outbox')
  end
  return eb
end
local function errback_fire(base, eb, id, err, now)
  if not eb.here then
    redis.call('XADD', base .. 'outbox', '*', 'kind', 'errback', 'failed', id,
      'error', err or '', 'spec', eb.spec)
    redis.call('PUBLISH', base .. 'control', '{"event":"outbox","job":"' .. id .. '"}')
    return
  end
  if eb.exists then return end
  local row = base .. 'job:' .. eb.id
  local payload = ERRBACK_MARK .. cjson.encode({job = id, error = err or ''}) .. '\n'
    .. eb.payload
  redis.call('HSET', row, 'state', 'pending', 'payload', payload, 'token', 0,
    'priority', eb.priority, 'created_at', now)
  -- the options at their default have no field (docs/keyspace.md, "The row")
  if tostring(eb.max_attempts) ~= '1' then
    redis.call('HSET', row, 'max_attempts', eb.max_attempts)
  end
  if eb.task ~= '' then redis.call('HSET', row, 'task', eb.task) end
  if eb.keep_result ~= '' then redis.call('HSET', row, 'keep_result', eb.keep_result) end
  if eb.keep_dead ~= '' then redis.call('HSET', row, 'keep_dead', eb.keep_dead) end
  local seq = redis.call('HINCRBY', base .. 'meta', 'seq', 1)
  redis.call('ZADD', base .. 'pending', band_score(eb.priority, seq), eb.id)
  push_wake(base .. 'wake', 1)
  redis.call('PUBLISH', base .. 'events', '{"event":"enqueued","job":"' .. eb.id .. '"}')
end
