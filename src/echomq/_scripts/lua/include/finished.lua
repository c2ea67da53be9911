-- finish_read / finished: jobs reached a terminal outcome (docs/results.md): one entry each
-- on the completions stream, the per-minute and total counters, the row's retention (a TTL
-- and its place in the `completed` / `cancelled` / `dead` index, scored by when the
-- retention ends) and
-- the index's bounded cleanup. Two calls, because a script reads every key it touches
-- before its first write (docs/lua.md, rule 1):
--   local fin = finish_read(base, kept, now, {{id, state}, ...})  -- with the reads
-- (or {id, state, fields, offset, _, row}: the row's finish_fields(kept), already read by
-- the caller's own HMGET of the row, as fields[offset + 1 ..]: one HMGET per job, not two;
-- and the row's key, when the caller has made it)
--   ... the script's own writes (the rows' state, finished_at) ...
--   finished(fin, i, detail)   -- job i; detail: result | error | reason, failures
-- state: completed | dead | cancelled | expired. kept: the set the rows stay in (completed |
-- dead | cancelled: a cancelled row is kept as a completed one is, keep_result and
-- max_completed; an expired one, claim.lua's, as a dead one is: kept 'dead', keep_dead and
-- max_dead, its error callback fired), or nil when the script deletes them (a cancelled
-- waiting job).
-- parents (optional): the flow parents' records of another finish_read of the same call
-- (complete_many finishes its completed and its cancelled jobs apart: one parent, one
-- record). finished(nil, id,
-- held, 'removed'): remove_job's hook; removal is not an outcome, so nothing of the above
-- is written, only the dedup key its job held (held_dedup, in its read phase) is released.
-- Dedup (docs/repeat.md): a window is a throttle; a job gives its key back when its row
-- is deleted unfinished: removed, or cancelled while waiting (kept nil); a key with no
-- window (mode until-finished) also when the job finishes, whatever its outcome.
-- Retention (queue settings in meta, else these defaults; a row's own keep_result /
-- keep_dead, set at enqueue, first): a kept row expires keep ms after it finished; 0
-- deletes it now (a waiter still reads the stream entry). The count caps are a memory
-- guard: past one, the rows closest to their end go first, counted in metrics:capped.
-- Per call at most FINISH_TRIM index entries are cleaned (expired, or 0.1 rows with no
-- TTL: given one from finished_at) and FINISH_TRIM rows deleted by the cap; the counters,
-- the stream's count guard and the index entries of the call's jobs are written once per
-- call (the first finished() does: every job given to finish_read is finished in the same
-- call). One EXISTS reads every job's logs key (a job's logs get its TTL only when some job
-- of the call has logs: PEXPIRE on a missing key is a no-op), unless the queue's meta says
-- `logs` 0 (no job of it has a log list, include/schema.lua): then no logs key is read or
-- touched (with many retained rows the EXISTS of absent keys is a cost per job); one XADD
-- per job (the first
-- with MINID ~, the stream's time retention: once per call, as the counters; the call's
-- other entries are as new). Numbers go to redis.call as strings made once (int_arg).
-- A queue with a concurrency (meta `concurrency`, read with the retention settings) and
-- ready work pushes one wake token per call: a consumer at the cap waits for it (claim.lua).
-- Flows (docs/flows.md): a job with a `parent` field tells its parent, in the same call:
-- its outcome goes into the parent's results hash (`c`|`d`|`x`|`r` + result | error |
-- reason | nothing), the parent's `open` counter drops by one (and `failed` grows for a
-- dead, cancelled or removed child), and the parent becomes pending when it is waiting,
-- not held by pages still to come, and either no child is open or (policy `fail`) a child
-- failed. An expired child tells its parent `dead` (a failed child, as a dead one). A queue
-- without flows pays absent fields of the HMGET below. A child whose
-- parent is on another queue (`parent_queue`) cannot write it (another slot): it writes
-- one entry on its own queue's outbox stream (emq:{q}:outbox: parent_queue, parent,
-- child, state, value, gen: the child's generation) that the workers relay (flow_notify.lua
-- on the parent's queue, idempotent per child and generation; docs/flows.md "Across
-- queues").
-- @include caps
-- @include wake
-- @include retention
-- @include score
-- @include lanes
-- @include ready
-- @include link_error
local FINISH_TRIM = 100
-- the per-minute counters live as long as queue_stats may read them, and 2 min
local METRICS_KEEP_MS = MAX_MINUTES * 60000 + 120000
local FINISH_DETAIL = {completed = 'result', dead = 'error', cancelled = 'reason',
  expired = 'error'}
local FINISH_TOTALS = {
  completed = 'metrics:completed', dead = 'metrics:dead', cancelled = 'metrics:cancelled',
  expired = 'metrics:expired',
}
-- held_dedup(base, row, id): the dedup key (emq:{q}:dedup:<key>) the job `id` holds (named
-- by its row's `dedup`, still holding this id; one that lapsed and was taken by a later
-- job is not its own), or nil. A read.
local function held_dedup(base, row, id)
  local name = redis.call('HGET', row, 'dedup')
  if not name then return nil end
  local key = base .. 'dedup:' .. name
  if redis.call('GET', key) == id then return key end
  return nil
end
local function flow_read(base, parents, id)
  -- a parent's fields, once per call (several children of one call share its record)
  if parents[id] ~= nil then return parents[id] end
  local row = base .. 'job:' .. id
  local f = redis.call('HMGET', row, 'state', 'held', 'policy', 'priority', 'group')
  local p = false
  if f[1] then
    p = {id = id, row = row, state = f[1], held = f[2] == '1', policy = f[3] or 'fail',
      priority = f[4] or '0', group = f[5]}
    redis.call('EXISTS', row .. ':results', base .. 'waiting', base .. 'pending',
      base .. 'meta', base .. 'wake')
    if f[5] then lanes_touch(base, f[5]) end  -- ready's reads of its lane
  end
  parents[id] = p
  return p
end
local function flow_ready(base, p)
  -- a waiting parent becomes pending: at the back of its priority band, through `ready`
  -- (flat pending, or its group's lane: docs/lanes.md), which wakes a consumer
  local seq = redis.call('HINCRBY', base .. 'meta', 'seq', 1)
  redis.call('ZREM', base .. 'waiting', p.id)
  redis.call('HSET', p.row, 'state', 'pending')
  ready(base, base .. 'pending', p.id, p.group, band_score(p.priority, seq))
  redis.call('PUBLISH', base .. 'events', '{"event":"ready","job":"' .. p.id .. '"}')
  p.state = 'pending'
end
local FLOW_MARK = {completed = 'c', dead = 'd', cancelled = 'x', removed = 'r'}
local function flow_outbox(base, parent_queue, parent, child, state, value, gen)
  -- a parent on another queue: the entry the workers relay (read: EXISTS outbox first),
  -- and a nudge on the workers' channel so one relays it now, not at its next sweep.
  -- gen: the child's generation (its row's `gen`: how many times it was re-opened; absent
  -- = 0), by which flow_notify orders and deduplicates a child's entries
  redis.call('XADD', base .. 'outbox', '*', 'parent_queue', parent_queue, 'parent', parent,
    'child', child, 'state', state, 'value', value or '', 'gen', gen or '0')
  redis.call('PUBLISH', base .. 'control', '{"event":"outbox","job":"' .. child .. '"}')
end
local function flow_notify(base, p, child, state, value)
  -- the child `child` of parent record p (flow_read) ended as `state`
  if not p then return end
  redis.call('HSET', p.row .. ':results', child, FLOW_MARK[state] .. (value or ''))
  local open = redis.call('HINCRBY', p.row, 'open', -1)
  local failure = state ~= 'completed'
  if failure then redis.call('HINCRBY', p.row, 'failed', 1) end
  if p.state == 'waiting' and not p.held and (open <= 0 or (failure and p.policy == 'fail')) then
    flow_ready(base, p)
  end
end
-- the row fields finish_read reads of each job (a caller that reads the row anyway may
-- read these in the same HMGET, after its own, and hand them over: see finish_read)
local function finish_fields(kept)
  if kept == 'dead' then  -- and a dying job's error callback (include/link_error.lua)
    return {'task', 'token', 'failures', 'created_at', 'claimed_at', 'keep_dead', 'parent',
      'kids', 'parent_queue', 'dedup', 'errback'}
  end
  return {'task', 'token', 'failures', 'created_at', 'claimed_at', 'keep_result', 'parent',
    'kids', 'parent_queue', 'dedup'}
end
local function finish_read(base, kept, now, jobs, parents)
  local names = {'keep_result', 'keep_dead', 'completions_keep', 'completions_max',
    'max_completed', 'max_dead', 'keep_payload'}
  local s = redis.call('HMGET', base .. 'meta', 'keep_result', 'keep_dead', 'completions_keep',
    'completions_max', 'max_completed', 'max_dead', 'keep_payload', 'logs', 'concurrency')
  local no_logs = s[8] == '0'  -- no job of the queue has a log list (include/schema.lua)
  local fin = {base = base, kept = kept, now = now, now_arg = int_arg(now), jobs = {},
    stream = base .. 'completions', drop = {}, migrate = {}, capped = {}, cleaned = false,
    parents = parents or {}, keep_args = {}, entry = {}, wake = false}
  if s[9] then  -- the queue's concurrency: a consumer at the cap waits for this finish
    fin.wake = redis.call('ZCARD', base .. 'pending') > 0
      or tonumber(redis.call('HGET', base .. 'meta', 'lane_jobs') or '0') > 0
    redis.call('EXISTS', base .. 'wake')
  end
  for i, name in ipairs(names) do fin[name] = tonumber(s[i]) or RETENTION_DEFAULTS[name] end
  fin.keep = fin[kept == 'dead' and 'keep_dead' or 'keep_result']  -- the queue's (a row's own first)
  local minute = math.floor(now / 60000)
  local derived, seen = {base .. 'completions', base .. 'metrics:capped'}, {}
  fin.counts = {}  -- state -> jobs of this call: one HINCRBY per counter per call
  local logs = {}
  local fields = nil
  for i, job in ipairs(jobs) do
    local id, state = job[1], job[2]
    local row = job[6] or base .. 'job:' .. id
    -- job[3], job[4]: the row's finish_fields(kept) already read, from index job[4] + 1
    local f, o = job[3], job[4] or 0
    if not f then
      fields = fields or finish_fields(kept)
      f, o = redis.call('HMGET', row, unpack(fields)), 0
    end
    if not no_logs then logs[i] = row .. ':logs' end
    -- the fields every job has, then the rare ones only when present (a record of 8
    -- slots, not 16; an absent field reads nil here, as false did)
    local rec = {id = id, state = state, row = row, task = f[o + 1],
      token = f[o + 2] or '0', created_at = f[o + 4], claimed_at = f[o + 5]}
    if logs[i] then rec.logs = logs[i] end
    if f[o + 3] then rec.failures = f[o + 3] end
    if f[o + 6] then rec.keep = tonumber(f[o + 6]) end
    if f[o + 7] then rec.parent = f[o + 7] end
    if f[o + 8] then rec.kids = f[o + 8] end
    if f[o + 9] then rec.parent_queue = f[o + 9] end
    fin.jobs[i] = rec
    local dedup_name = f[o + 10]
    if kept == 'dead' and f[o + 11] then rec.eb = errback_read(base, f[o + 11]) end
    f = rec
    if not kept then
      f.dedup = held_dedup(base, row, id)
    elseif dedup_name then  -- a dedup key held until the job finishes has no window
      local key = base .. 'dedup:' .. dedup_name
      if redis.call('GET', key) == id and redis.call('PTTL', key) == -1 then f.dedup = key end
    end
    if f.kids then redis.call('EXISTS', row .. ':children', row .. ':results', row .. ':remote') end
    if f.parent_queue then  -- a flow child of a parent on another queue: the outbox
      redis.call('EXISTS', base .. 'outbox')
      f.gen = redis.call('HGET', row, 'gen')
    elseif f.parent then  -- a flow child (the only cost to a queue without flows: absent fields)
      f.p = flow_read(base, fin.parents, f.parent)
    end
    if not seen[state] then
      seen[state] = true
      derived[#derived + 1] = base .. FINISH_TOTALS[state]
      derived[#derived + 1] = base .. 'metrics:' .. state .. ':' .. minute
    end
    fin.counts[state] = (fin.counts[state] or 0) + 1
  end
  redis.call('EXISTS', unpack(derived))  -- read: a key moved mid-reshard fails here
  fin.has_logs = #logs > 0 and redis.call('EXISTS', unpack(logs)) > 0  -- jobs <= 250
  if not kept then return fin end
  -- the index: entries whose retention ended, then the count guard (each bounded)
  local index = base .. kept
  fin.index = index
  local mine = nil  -- the call's own ids, made only when the cleanup has entries to check
  local function mine_has(id)
    if not mine then
      mine = {}
      for _, job in ipairs(fin.jobs) do mine[job.id] = true end
    end
    return mine[id]
  end
  local expired = redis.call('ZRANGEBYSCORE', index, '-inf', now, 'LIMIT', 0, FINISH_TRIM)
  for _, old in ipairs(expired) do
    local row = base .. 'job:' .. old
    if not mine_has(old) then fin.drop[#fin.drop + 1] = old end
    if not mine_has(old) and redis.call('PTTL', row) == -1 then  -- a row with no TTL (written by echomq 0.1)
      local f = redis.call('HMGET', row, 'state', 'finished_at')
      if f[1] == kept then
        local keep = fin[kept == 'dead' and 'keep_dead' or 'keep_result']
        redis.call('EXISTS', row .. ':logs')
        fin.migrate[#fin.migrate + 1] = {old, row, (tonumber(f[2]) or now) + keep}
      end
    end
  end
  local cap = fin[kept == 'dead' and 'max_dead' or 'max_completed']
  local excess = redis.call('ZCARD', index) + #jobs - #expired - cap
  if excess > 0 then
    local n = math.min(excess, FINISH_TRIM)
    for _, old in ipairs(redis.call('ZRANGE', index, #expired, #expired + n - 1)) do
      if not mine_has(old) then
        local row = base .. 'job:' .. old
        redis.call('EXISTS', row .. ':logs')
        local state = redis.call('HGET', row, 'state')
        fin.capped[#fin.capped + 1] = {old, row,
          state == kept or (kept == 'dead' and state == 'expired')}
      end
    end
  end
  return fin
end
local function finish_clean(fin)
  fin.cleaned = true
  local base, index, now = fin.base, fin.index, fin.now
  local gone, capped_rows = {}, 0
  for _, old in ipairs(fin.drop) do gone[#gone + 1] = old end
  for _, c in ipairs(fin.capped) do
    gone[#gone + 1] = c[1]
    if c[3] then
      redis.call('DEL', c[2], c[2] .. ':logs')
      capped_rows = capped_rows + 1
    end
  end
  for i = 1, #gone, 100 do
    redis.call('ZREM', index, unpack(gone, i, math.min(i + 99, #gone)))
  end
  for _, m in ipairs(fin.migrate) do  -- a 0.1 row: it ends keep ms after it finished
    if m[3] > now then
      redis.call('PEXPIREAT', m[2], m[3])
      redis.call('PEXPIREAT', m[2] .. ':logs', m[3])
      redis.call('ZADD', index, m[3], m[1])
    else
      redis.call('DEL', m[2], m[2] .. ':logs')
    end
  end
  if capped_rows > 0 then
    redis.call('HINCRBY', base .. 'metrics:capped', fin.kept, capped_rows)
  end
end
local function finished(fin, i, detail)
  if fin == nil then  -- remove_job (i: the dedup key its job held, or nil): not an outcome;
    -- detail.parent: a live flow child's parent ({base, record = flow_read(...)}, or
    -- {base, queue, id, gen} on another queue), detail.id the child
    if i then redis.call('DEL', i) end
    if type(detail) == 'table' and detail.parent then
      local pr = detail.parent
      if pr.queue then  -- a parent on another queue
        flow_outbox(pr.base, pr.queue, pr.id, detail.id, 'removed', '', pr.gen)
      else
        flow_notify(pr.base, pr.record, detail.id, 'removed', '')
      end
    end
    return
  end
  local job, base, now = fin.jobs[i], fin.base, fin.now
  local what = FINISH_DETAIL[job.state]
  local value = detail[what]
  -- the entry (docs/results.md), in this order; a field whose value is unknown is left out
  -- (an absent field reads false); one table per call, rewritten job by job: entry[1..n]
  local entry = fin.entry
  entry[1], entry[2], entry[3], entry[4], entry[5], entry[6] =
    'id', job.id, 'state', job.state, 'token', job.token
  local n = 6
  local v = job.task
  if v then entry[7], entry[8], n = 'task', v, 8 end
  entry[n + 1], entry[n + 2], n = what, value or '', n + 2
  -- (always: a row with no failures has no such field)
  entry[n + 1], entry[n + 2], n = 'failures', detail.failures or job.failures or '0', n + 2
  v = job.created_at
  if v then entry[n + 1], entry[n + 2], n = 'created_at', v, n + 2 end
  v = job.claimed_at
  if v then entry[n + 1], entry[n + 2], n = 'claimed_at', v, n + 2 end
  entry[n + 1], entry[n + 2], n = 'finished_at', fin.now_arg, n + 2
  local stream = fin.stream
  if job.parent then  -- an expired child is a failed child to its parent, as a dead one
    local told = job.state == 'expired' and 'dead' or job.state
    if job.parent_queue then
      flow_outbox(base, job.parent_queue, job.parent, job.id, told, value, job.gen)
    else
      flow_notify(base, job.p, job.id, told, value)
    end
  end
  if fin.cleaned then
    redis.call('XADD', stream, '*', unpack(entry, 1, n))
  else  -- the stream's time retention, once per call (the call's entries are all newer)
    redis.call('XADD', stream, 'MINID', '~', int_arg(now - fin.completions_keep), '*',
      unpack(entry, 1, n))
  end
  if job.dedup then redis.call('DEL', job.dedup) end
  if job.eb then errback_fire(base, job.eb, job.id, value, fin.now_arg) end
  if fin.kept then
    local keep = job.keep or fin.keep
    if keep <= 0 then
      if job.logs then redis.call('DEL', job.row, job.logs) else redis.call('DEL', job.row) end
      redis.call('ZREM', fin.index, job.id)
      if job.kids then
        redis.call('DEL', job.row .. ':children', job.row .. ':results', job.row .. ':remote')
      end
    else
      local arg = fin.keep_args[keep]
      if not arg then
        arg = {int_arg(keep), int_arg(now + keep)}  -- the TTL, and the index score
        fin.keep_args[keep] = arg
      end
      keep = arg[1]
      redis.call('PEXPIRE', job.row, keep)
      if fin.has_logs then redis.call('PEXPIRE', job.logs, keep) end
      if job.kids then  -- a flow parent's children and their results end with its row
        redis.call('PEXPIRE', job.row .. ':children', keep)
        redis.call('PEXPIRE', job.row .. ':results', keep)
        redis.call('PEXPIRE', job.row .. ':remote', keep)
      end
    end
  end
  if not fin.cleaned then  -- once per call: the index, the counters, the stream's guard,
    if fin.kept then      -- the cleanup; the index gets every kept job of the call
      local add, n = {}, 0
      for _, j in ipairs(fin.jobs) do
        local keep = j.keep or fin.keep
        if keep > 0 then
          local arg = fin.keep_args[keep]
          if not arg then
            arg = {int_arg(keep), int_arg(now + keep)}
            fin.keep_args[keep] = arg
          end
          add[n + 1], add[n + 2] = arg[2], j.id
          n = n + 2
        end
        if n == 512 then  -- ZADD per 256 members (docs/lua.md, rule 4)
          redis.call('ZADD', fin.index, unpack(add, 1, n))
          n = 0
        end
      end
      if n > 0 then redis.call('ZADD', fin.index, unpack(add, 1, n)) end
    end
    for state, n in pairs(fin.counts) do
      redis.call('HINCRBY', base .. FINISH_TOTALS[state], 'count', n)
      local bucket = base .. 'metrics:' .. state .. ':' .. math.floor(now / 60000)
      if redis.call('HINCRBY', bucket, 'count', n) == n then
        redis.call('PEXPIRE', bucket, METRICS_KEEP_MS)
      end
    end
    local trimmed = redis.call('XTRIM', stream, 'MAXLEN', '~', fin.completions_max)
    if trimmed > 0 then redis.call('HINCRBY', base .. 'metrics:capped', 'completions', trimmed) end
    if fin.wake then push_wake(base .. 'wake', 1) end
    if fin.kept then finish_clean(fin) else fin.cleaned = true end
  end
end
