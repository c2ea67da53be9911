--[[
  Enqueue one or more jobs (a bulk enqueue is one call, all or nothing), each under its
  dedup key when it has one; or fire one due run of a repeatable (the repeat tail).
  KEYS  1 pending   ZSET  ready ids; score = -priority * 2^40 + seq (higher priority first, FIFO)
        2 schedule  ZSET  delayed ids; score = run-at ms
        3 meta      HASH  queue settings; seq = the FIFO counter; schema_version (set
                          if absent: the queue exists from now on); paused
        4 wake      LIST  wake tokens for idle consumers
        5 repeat    ZSET  the repeat registry: key -> next slot ms (a repeat run only)
        6 record    HASH  the repeatable's record, emq:{q}:repeat:<key> (a repeat run only)
  ARGV  1 queue base (emq:{q}:)   2 number of jobs n (1..MAX_ENQUEUE)   3 number of
          option sets m (1..n)
        then m option sets, from 4 on: each is the values of SET_FIELDS (below), in
          its order
        then n jobs of 3: id, payload, its option set (1..m)
        then, for a repeat run only (n = 1), 5 more: repeat key, the record's next slot ms
          as read (compare-and-set), the new next slot ms, this run's slot ms, the due
          slots coalesced into this run
  Returns  n when every job was written; else one entry per job: 1 written, or the id of
           the job that holds its dedup key (that job is not written).
           A repeat run: 1 fired (its job written, next advanced) | 2 its job exists
           (next advanced, nothing else written) | 0 not fired (the record's next is not
           the one read, the record is gone or paused, or the queue is paused: nothing
           written)
  Errors   EMQDUP <id>   a row with that id exists (or the id repeats in the call)
           EMQSCHEMA     the queue's layout version is not this echomq's (nothing written)
           EMQARG        n is not 1..MAX_ENQUEUE, m not 1..n, they do not match the argument
                         count, or a job names no option set
           EMQFORMAT     the repeat record has another layout version (nothing written)
  Events   enqueued | scheduled (per job written), debounced (per holder replaced; only
           while the channel has a listener: include/events.lua); on the workers' channel (emq:{q}:control)
           one scheduled {delay_ms} per call with delayed jobs written: the soonest delay
  Moves    (none) -> pending | scheduled
  Bound    O(n * log N); at most MAX_ENQUEUE jobs per call (include/caps.lua)
  Every id and dedup key is checked before the first write, so a refused call writes
  nothing. A dedup key (emq:{q}:dedup:<key>) holds the id of the job that took it for its
  window (SET PX; no window in mode until-finished: the job's finish releases it,
  include/finished.lua); a job under a held key, or under a key an earlier job of the same
  call takes, is answered with the holder's id. In mode debounce, a holder still pending or
  scheduled takes the new job's payload (and, delayed, its delay again from now; with a
  deadline, its deadline), and the key's window starts again. A repeat run's id is <key>~<slot>, so one slot
  is one job however many schedulers race; the compare-and-set on `next` is what makes
  them fire it once. It marks the queue (open_queue: meta's schema_version), so a queue
  whose only jobs are delayed is found by discovery too.
  Jobs of a call share their options (one set for a bulk of one task's jobs): each set is
  read once, and a job is sent as its id, its payload and its set's number.
  A grouped job (docs/lanes.md) gets the row field `group` and waits in its group's lane
  when ready (the `ready` helper); a delayed one waits in the schedule set like any other.
]]
-- @include caps
-- @include time
-- @include score
-- @include schema
-- @include repeat
-- @include events
-- @include lanes
-- @include ready
-- @include expiry
local SET, JOB = 13, 3  -- arguments per option set (its fields: SET_FIELDS below), per job
local pending, schedule, meta, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local base = ARGV[1]
local n, m = tonumber(ARGV[2]), tonumber(ARGV[3])
local tail = n and m and #ARGV - 3 - m * SET - n * JOB
if not n or n < 1 or n > MAX_ENQUEUE or not m or m < 1 or m > n
    or (tail ~= 0 and not (tail == 5 and n == 1)) then
  return redis.error_reply('EMQARG enqueue takes 1..' .. MAX_ENQUEUE
    .. ' jobs of 3 arguments and 1..n option sets of ' .. SET)
end
local first = 4 + m * SET  -- the first job's id
local last = first + n * JOB  -- the repeat tail, when there is one

-- the option sets, read once (one unpack each; no table per field): the row's optional
-- fields in this order when given (task, keep_result, keep_dead, dedup, repeat, headers,
-- group), the delay, the group. `dedups` / `grouped_sets`: some set has a dedup key / a
-- group (the tables only those need are made only then)
local fire = tail == 5
local rkey = ARGV[last]
local sets, dedups, grouped_sets = {}, false, false
for k = 1, m do
  -- SET_FIELDS: an option set's fields, in the order they are sent (the one place of
  -- that order: loader.ENQUEUE_SET_FIELDS reads these names, jobs/lifecycle.py sends
  -- every set in it): the delay ms, the priority, max_attempts; the row's optional fields
  -- task, keep_result / keep_dead ms and headers (a JSON object of strings: the hooks'
  -- and the trace context's) ('' = none: the row has no such field); the dedup key
  -- ('' = none), its window ms (0 = none: until finished only) and its mode
  -- ('' = throttle, 'f' = until finished, 'd' = debounce); the group ('' = none) and its
  -- concurrency (0 = none: the group's limit, set if it has none); the deadline ('' =
  -- none; '<ms>' after the enqueue, '@<ms>' a server epoch ms: include/expiry.lua)
  local delay_ms, priority, max_attempts, task, keep_result, keep_dead, dedup, dedup_ms,
    dedup_mode, group, group_concurrency, headers, expires =
    unpack(ARGV, 4 + (k - 1) * SET, 3 + k * SET)
  -- a row stores what differs from the defaults (readers take an absent `max_attempts`
  -- as 1, `failures` and `stalled` as 0: docs/keyspace.md, "The row"), but for
  -- `priority`, which every row has
  local extra, e = {'priority', priority}, 2
  if max_attempts ~= '1' then
    extra[e + 1], extra[e + 2], e = 'max_attempts', max_attempts, e + 2
  end
  if task ~= '' then extra[e + 1], extra[e + 2], e = 'task', task, e + 2 end
  if keep_result ~= '' then extra[e + 1], extra[e + 2], e = 'keep_result', keep_result, e + 2 end
  if keep_dead ~= '' then extra[e + 1], extra[e + 2], e = 'keep_dead', keep_dead, e + 2 end
  if dedup ~= '' then
    extra[e + 1], extra[e + 2], e = 'dedup', dedup, e + 2
    dedups = true
  end
  if fire then extra[e + 1], extra[e + 2], e = 'repeat', rkey, e + 2 end
  if headers ~= '' then extra[e + 1], extra[e + 2], e = 'headers', headers, e + 2 end
  if group ~= '' then
    extra[e + 1], extra[e + 2] = 'group', group
    grouped_sets = true
  end
  sets[k] = {
    delay = tonumber(delay_ms), priority = priority, max_attempts = max_attempts,
    dedup = dedup, dedup_ms = dedup_ms, dedup_mode = dedup_mode, group = group ~= '' and group,
    limit = tonumber(group_concurrency), extra = extra, expires = expires,
    score0 = -tonumber(priority) * BAND,  -- band_score(priority, 0): + seq per job
  }
end

-- a repeat run: the record must still be due at the slot the scheduler read
if fire then
  local rec = redis.call('HMGET', KEYS[6], 'v', 'next', 'paused')
  if rec[1] and tonumber(rec[1]) ~= REPEAT_FORMAT then
    return redis.error_reply('EMQFORMAT repeat record ' .. rkey .. ' has layout version '
      .. rec[1] .. ', not ' .. REPEAT_FORMAT)
  end
  if not rec[1] or rec[3] or tonumber(rec[2]) ~= tonumber(ARGV[last + 1])
      or redis.call('HEXISTS', meta, 'paused') == 1 then
    return 0
  end
end

-- checks first: dedup keys, then ids (none may exist, or repeat); then the lanes' keys
-- are read (rule 1). One EXISTS over every row first: when none exists (the common
-- case), no job needs its own (the answer per job would be 0 each time). The tables a
-- lone job never needs are made only when needed: `seen` (ids of the call) for more than
-- one job, `taken` and `debounced` for dedup keys, `groups` for groups, `holders` at the
-- first job not written
local rows, jobset = {}, {}
for i = 1, n do
  local j = first + (i - 1) * JOB
  rows[i] = base .. 'job:' .. ARGV[j]
  jobset[i] = sets[tonumber(ARGV[j + 2])]
  if not jobset[i] then
    return redis.error_reply('EMQARG enqueue: job ' .. ARGV[j] .. ' names no option set 1..' .. m)
  end
end
local some_exist = redis.call('EXISTS', unpack(rows, 1, n)) > 0
local seen = n > 1 and {}
local taken, debounced = dedups and {}, dedups and {}  -- debounced: i -> {the holder's
-- row, its state}: its payload is replaced
local groups = grouped_sets and {}
local holders, ready_n, written = false, 0, 0
for i = 1, n do
  local id, set = ARGV[first + (i - 1) * JOB], jobset[i]
  local dedup = set.dedup
  local holder = false
  if dedup ~= '' then holder = taken[dedup] or redis.call('GET', base .. 'dedup:' .. dedup) end
  if holder then
    holders = holders or {}
    holders[i] = holder
    if set.dedup_mode == 'd' and not taken[dedup] then  -- debounce: a holder still waiting
      local hrow = base .. 'job:' .. holder
      local hstate = redis.call('HGET', hrow, 'state')
      if hstate == 'pending' or hstate == 'scheduled' then
        debounced[i] = {hrow, hstate}
      end
    end
  elseif (seen and seen[id]) or (some_exist and redis.call('EXISTS', rows[i]) == 1) then
    if not fire then return redis.error_reply('EMQDUP job exists: ' .. id) end
    holders = holders or {}
    holders[i] = id  -- the run's job exists: this slot fired already
  else
    if seen then seen[id] = true end
    if dedup ~= '' then taken[dedup] = id end
    written = written + 1
    if set.delay == 0 then ready_n = ready_n + 1 end
    local group = set.group
    if group and not groups[group] then
      groups[group] = true
      lanes_touch(base, group)
    end
  end
end

local now = now_ms()
-- the numbers of a row go to redis.call as text: Redis 7.0 turns a Lua number into an
-- argument with %.17g, which costs more than most of the HSET
local now_s = string.format('%d', now)
open_queue(meta)
-- a set with a deadline: its rows get `expires_at`, and the queue its `expiring` flag
local expiring = false
for _, set in ipairs(sets) do
  if set.expires ~= '' then
    local extra = set.extra
    extra[#extra + 1] = 'expires_at'
    extra[#extra + 1] = string.format('%d', expiry_at(set.expires, now))
    expiring = true
  end
end
if expiring then redis.call('HSET', meta, 'expiring', '1') end
local channel = base .. 'events'
local loud = heard(channel, n)  -- (include/events.lua)
-- one counter bump for the whole call: the ready jobs take seq + 1 .. seq + ready
local seq = 0
if ready_n > 0 then seq = redis.call('HINCRBY', meta, 'seq', ready_n) - ready_n end
local flat, grouped, nflat = {}, false, 0  -- the ready jobs, placed by one ready_batch
local soonest = nil  -- the shortest delay of the call, for the workers' channel
for i = 1, n do
  -- a dedup hit (or a repeat slot that fired already): nothing to write, but for a
  -- debounce: the waiting holder takes this job's payload, its delay starts again, and
  -- the key's window is extended
  local d = debounced and debounced[i]
  if d then
    local set = jobset[i]
    local holder = holders[i]
    redis.call('HSET', d[1], 'payload', ARGV[first + (i - 1) * JOB + 1])
    if d[2] == 'scheduled' and set.delay > 0 then
      local run_at = string.format('%d', now + set.delay)
      redis.call('HSET', d[1], 'run_at', run_at)
      redis.call('ZADD', schedule, run_at, holder)
    end
    if set.expires ~= '' then  -- and its deadline, when it has one (include/expiry.lua)
      redis.call('HSET', d[1], 'expires_at', string.format('%d', expiry_at(set.expires, now)))
    end
    if set.dedup_ms ~= '0' then
      redis.call('PEXPIRE', base .. 'dedup:' .. set.dedup, set.dedup_ms)
    end
    if loud then redis.call('PUBLISH', channel, '{"event":"debounced","job":"' .. holder .. '"}') end
  end
  if not (holders and holders[i]) then
    local j = first + (i - 1) * JOB
    local id, set = ARGV[j], jobset[i]
    local delay, group = set.delay, set.group
    if delay > 0 then
      local run_at = string.format('%d', now + delay)
      redis.call('HSET', rows[i], 'state', 'scheduled', 'payload', ARGV[j + 1], 'token', '0',
        'created_at', now_s, 'run_at', run_at, unpack(set.extra))
      redis.call('ZADD', schedule, run_at, id)
      if loud then redis.call('PUBLISH', channel, '{"event":"scheduled","job":"' .. id .. '"}') end
      if not soonest or delay < soonest then soonest = delay end
    else
      seq = seq + 1
      redis.call('HSET', rows[i], 'state', 'pending', 'payload', ARGV[j + 1], 'token', '0',
        'created_at', now_s, unpack(set.extra))
      if group then
        grouped = grouped or {}
        grouped[#grouped + 1] = {id, group, band_score(set.priority, seq)}
      else
        nflat = nflat + 2
        flat[nflat - 1], flat[nflat] = set.score0 + seq, id
      end
      if loud then redis.call('PUBLISH', channel, '{"event":"enqueued","job":"' .. id .. '"}') end
    end
    if group and set.limit > 0 then
      redis.call('HSETNX', base .. 'gstate', group .. ':limit', set.limit)
    end
    if set.dedup ~= '' then
      if set.dedup_ms == '0' then  -- until finished, no window: the finish releases it
        redis.call('SET', base .. 'dedup:' .. set.dedup, id)
      else
        redis.call('SET', base .. 'dedup:' .. set.dedup, id, 'PX', set.dedup_ms)
      end
    end
  end
end
ready_batch(base, pending, flat, grouped)
if soonest then
  redis.call('PUBLISH', base .. 'control', '{"event":"scheduled","delay_ms":' .. soonest .. '}')
end

if fire then
  local next_slot = ARGV[last + 2]
  redis.call('HSET', KEYS[6], 'next', next_slot, 'last_slot', ARGV[last + 3],
    'last_job', ARGV[first], 'fired_at', now)
  if written > 0 then redis.call('HINCRBY', KEYS[6], 'runs', 1) end
  if tonumber(ARGV[last + 4]) > 0 then
    redis.call('HINCRBY', KEYS[6], 'coalesced', ARGV[last + 4])
  end
  redis.call('ZADD', KEYS[5], next_slot, rkey)
  if written > 0 then return 1 end
  return 2
end
if written == n then return n end
local answers = {}
for i = 1, n do answers[i] = holders[i] or 1 end
return answers
