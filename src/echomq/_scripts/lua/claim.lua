--[[
  Claim up to `count` ready jobs and grant each a lease; promote due scheduled jobs first.
  KEYS  1 pending   ZSET  ready ids; score = -priority * 2^40 + seq (higher priority first)
        2 active    ZSET  claimed ids; score = lease deadline ms (server clock)
        3 schedule  ZSET  delayed ids; score = run-at ms
        4 meta      HASH  `paused` = the claim gate; `hold` = a flow cancel's claim hold
                          (its end, server ms: flow_cancel.lua); `seq` = the FIFO counter;
                          the limits (`rate_max`, `rate_ms`, `group_rate_max`,
                          `group_rate_ms`, `concurrency`, `rate_kind`, `group_rate_kind`);
                          `blocked_until` = a back-off's end
        5 wake      LIST  wake tokens for idle consumers
  ARGV  1 queue base   2 lease_ms   3 count (1..MAX_COUNT)   4 the claiming worker's id ('': none)
  Returns  flat array: id, payload, token (the row's `token`, grown by one), failures, headers (the row's
           `headers` field, nil when absent), waited (ms from the job's due time, its
           `run_at` or else its `created_at`, to now; nil when the row has neither), ...
           and, when fewer than
           `count` jobs were claimed, one trailing element: ms until more work may be
           claimable (the earliest scheduled job, a group's or the queue's rate window
           reopening; 0 = now), or -1 when nothing is known | {} when paused | {ms} while
           a flow cancel holds the queue's claims (ms until the hold ends)
  Errors   EMQARG   count is not 1..MAX_COUNT (nothing written; the verb refuses it first)
  Events   promoted (per due scheduled job); active (per claimed job, with its token);
           only while the channel has a listener (include/events.lua); expired (per job
           dropped past its deadline)
  Moves    scheduled -> pending (due) | expired; pending -> active | expired; dead | expired
           -> (none) (the retention, other rows); waiting -> pending (an expired job's flow
           parent, docs/flows.md); (none) -> pending (an expired job's error callback on
           its queue, include/link_error.lua)
  Bound    O((count + promoted) * log N); at most MAX_COUNT claimed (include/caps.lua),
           MAX_PROMOTE promoted, MAX_TURNS ring members (groups served), MAX_REOPEN
           groups whose rate window reopened and MAX_EXPIRE expired per call; an expiry
           adds the retention's cleanup (include/finished.lua: at most 100 expired index
           entries and 100 capped rows per call)
  The pause gate is read here, first, in the same round trip (not a separate HGET): a
  paused queue answers {} and nothing is written, not even a promotion. A claim hold
  (meta `hold` in the future: a big flow being cancelled or removed, page by page, so that
  none of its jobs is claimed between the pages; docs/flows.md) answers {ms until it ends}
  and writes nothing either; one that lapsed (its canceller died) is ignored.
  The queue's rate limit (meta `rate_max` starts per `rate_ms` window, aligned on the
  server clock; docs/lanes.md; with meta `rate_kind` = sliding, the starts of the last
  `rate_ms` ms, kept in the zset `slide`): a full window answers {ms until it reopens} and
  writes nothing; otherwise at most what the window has left is claimed.
  A back-off (rate_limited.lua: a task raised RateLimited): until meta `blocked_until`
  (server ms) the claim answers {ms until then} and writes nothing; a group's back-off
  parks it in glimited, as a full rate window does.
  The queue's concurrency (meta `concurrency`): at most that many jobs in active, across
  every worker (ZCARD of active, read only when the field is set); at the cap the claim
  answers {-1} and writes nothing (a finish pushes a wake token while the queue has a cap
  and ready work: include/finished.lua); under it, at most the room left is claimed.
  Reads before writes (docs/lua.md, rule 1): the due ids and their rows, the candidates
  and the rows of those it will take, every lane and group key it touches, all before
  the first write.
  Flat (no group lanes in the ring, none waiting for a window): the jobs taken are the
  `count` lowest scores of pending and the promoted together, as if the promoted were
  added first and `count` popped.
  Lanes (docs/lanes.md): while a group is in the ring or waiting for its window, the
  picks are the ring's turns (include/lane_turns.lua: round robin, one job per turn, the
  ungrouped jobs taking turns as the member ''); a claim that took fewer than `count`
  because the ring is longer than it reads answers 0 ms and pushes a wake token.
  Promoted grouped jobs go to their lanes (the `ready` helper) and are claimed next time.
  Every claimed row is stamped with lease_epoch = the server's run_id (INFO server) and
  `worker` = the claiming worker's id (its heartbeat record; deleted when none is given),
  which explain reads to say whether the holder is alive, blocked or gone.
  Promoted jobs beyond what this call takes push a wake token for the other consumers.
  Expiry (include/expiry.lua; docs/runtime.md "Expiry"): on a queue whose meta has
  `expiring` (read with the gate: a queue that never had a deadline reads nothing more),
  the due jobs and the picks are read with their `expires_at`; one whose deadline is at or
  before server now is not promoted or claimed but finishes `expired` (include/finished.lua,
  state expired: the completions entry with error `expired`, metrics:expired, the `dead`
  index and keep_dead, its flow parent told of a failed child, its error callback
  enqueued). At most MAX_EXPIRE a call: a due job past that bound is promoted as usual,
  and on such a queue a claim takes at most MAX_EXPIRE minus the expired promotions. An
  expired pick starts nothing: its group's slot and rate window are not spent, and the
  group takes its turn again (lane_join); a claim that dropped any answers 0 ms (claim
  again now) and pushes a wake token. The deadline holds for every start: a retry or a
  recovered job claimed after it expires too.
]]
local pending, active, schedule, meta, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local base = ARGV[1]
local lease = tonumber(ARGV[2])
local count = tonumber(ARGV[3])
local worker = ARGV[4]
-- @include caps
-- @include time
-- @include score
-- @include wake
-- @include run_id
-- @include events
-- @include lanes
-- @include ready
-- @include rate_window
-- @include lane_turns
-- @include finished
local MAX_PROMOTE = 100
local MAX_EXPIRE = 100  -- expired jobs dropped per call (include/expiry.lua)
-- 80 bytes, not an id (a literal: made once, when the script is loaded)
local SKIPLIST_MARK =
  'emq:skiplist:-------------------------------------------------------------------'
local SKIPLIST_FROM = 8  -- claims of fewer jobs leave active as it is (a worker's few leases)
if not count or count < 1 or count > MAX_COUNT then
  return redis.error_reply('EMQARG claim count must be 1..' .. MAX_COUNT)
end

-- the gate: any `paused` field means paused; the backlog is untouched
local gate = redis.call('HMGET', meta, 'paused', 'rate_max', 'rate_ms', 'group_rate_max',
  'group_rate_ms', 'group_concurrency', 'hold', 'concurrency', 'blocked_until', 'rate_kind',
  'group_rate_kind', 'expiring')
if gate[1] then return {} end

local now = now_ms()
if gate[7] and tonumber(gate[7]) > now then return {tonumber(gate[7]) - now} end
local channel = base .. 'events'
if gate[9] then  -- a back-off of the whole queue (rate_limited.lua)
  local left = tonumber(gate[9]) - now
  if left > 0 then return {left} end
end

-- the queue's rate window: a full one answers when it reopens; else it bounds the claim
local qwin = nil
local want = count
if gate[2] then
  if gate[10] == 'sliding' then  -- include/rate_window.lua: no edge to burst across
    qwin = slide_window(base .. 'slide', tonumber(gate[2]), tonumber(gate[3]), now)
  else
    qwin = rate_window(base .. 'rate', tonumber(gate[2]), tonumber(gate[3]), now)
  end
  if qwin[2] >= qwin[3] then return {qwin[4]} end
  want = math.min(count, qwin[3] - qwin[2])
end
-- the queue's concurrency: the room left in active, across every worker
local capped = false  -- it bounds this claim
if gate[8] then
  local room = tonumber(gate[8]) - redis.call('ZCARD', active)
  if room <= 0 then return {-1} end
  if room <= want then want, capped = room, true end
end

-- reads: the due scheduled jobs (each to the back of its band), then the candidates
local due = redis.call('ZRANGEBYSCORE', schedule, '-inf', now, 'LIMIT', 0, MAX_PROMOTE)
local promoted = {}  -- {id, score, promoted?, group}: due ids with a row
local candidates = {}  -- ungrouped: {id, score, promoted?}
local expiring = gate[12]  -- some job of the queue has a deadline (include/expiry.lua)
local expired = {}  -- {id, group}: jobs whose deadline passed before they started
if #due > 0 then
  local seq = tonumber(redis.call('HGET', meta, 'seq') or '0')
  for i, id in ipairs(due) do
    local f
    if expiring then
      f = redis.call('HMGET', base .. 'job:' .. id, 'priority', 'group', 'expires_at')
      if f[3] and #expired < MAX_EXPIRE and tonumber(f[3]) <= now then
        expired[#expired + 1] = {id, f[2]}
        f[1] = false  -- not promoted: it expires here
      end
    else
      f = redis.call('HMGET', base .. 'job:' .. id, 'priority', 'group')
    end
    if f[1] then
      local job = {id, band_score(f[1], seq + i), true, f[2]}
      promoted[#promoted + 1] = job
      if f[2] then lanes_touch(base, f[2]) else candidates[#candidates + 1] = job end
    end
  end
end
-- a queue with deadlines: the picks are bounded so that the call drops at most
-- MAX_EXPIRE expired jobs (each pick may be one)
if expiring then want = math.min(want, MAX_EXPIRE - #expired) end
-- cands: the ungrouped candidates' ids in claim order; head_n of them read from pending
local flat_promoted = #candidates
local cands, head_n
if want == 0 then  -- (only when this call's promotions dropped MAX_EXPIRE expired jobs)
  cands, head_n = {}, 0
elseif flat_promoted == 0 then  -- (the usual case: pending's order is the claim order)
  cands = redis.call('ZRANGE', pending, 0, want - 1)
  head_n = #cands
else
  local head = redis.call('ZRANGE', pending, 0, want - 1, 'WITHSCORES')
  head_n = #head / 2
  for i = 1, #head, 2 do candidates[#candidates + 1] = {head[i], tonumber(head[i + 1]), false} end
  table.sort(candidates, function(a, b)  -- ZPOPMIN's order: score, then id
    if a[2] ~= b[2] then return a[2] < b[2] end
    return a[1] < b[1]
  end)
  cands = {}
  for i, c in ipairs(candidates) do cands[i] = c[1] end
end

-- the picks, in claim order: ids, and each one's group (nil: ungrouped); flat_n of them
-- are the first ungrouped candidates. Flat: pending's head; with group lanes, the ring's
-- turns (include/lane_turns.lua)
local turns = want > 0 and lane_turns(base, now, want, cands, head_n, gate) or nil
local picks, pgroup, flat_n
if turns then
  picks, pgroup, flat_n = turns.picks, turns.pgroup, turns.flat_n
else
  flat_n = math.min(want, #cands)
  picks, pgroup = flat_n == #cands and cands or {unpack(cands, 1, flat_n)}, {}
end

-- the rows of the picks (an id with no row leaves its set and is not claimed)
local rows, keys, taken, from_pending = {}, {}, {}, {}
local lapsed, lapsed_n = {}, 0  -- pick index -> true: its deadline passed (it expires)
for i, id in ipairs(picks) do
  local row = base .. 'job:' .. id
  keys[i] = row
  if expiring then
    local fields = redis.call('HMGET', row, 'payload', 'failures', 'headers', 'token',
      'run_at', 'created_at', 'expires_at')
    if fields[1] and fields[7] and tonumber(fields[7]) <= now then
      lapsed[i], lapsed_n = true, lapsed_n + 1
      expired[#expired + 1] = {id, pgroup[i]}
    end
    rows[i] = fields
  else
    rows[i] = redis.call('HMGET', row, 'payload', 'failures', 'headers', 'token',
      'run_at', 'created_at')
  end
end
-- the expired jobs' finish (include/finished.lua: kept in `dead`, keep_dead), read now
local fin = nil
if #expired > 0 then
  local jobs = {}
  for i, e in ipairs(expired) do jobs[i] = {e[1], 'expired'} end
  fin = finish_read(base, 'dead', now, jobs)
end
if #promoted > 0 then
  for _, id in ipairs(picks) do taken[id] = true end
end
if flat_promoted == 0 then
  from_pending = flat_n == #cands and cands or {unpack(cands, 1, flat_n)}
else
  for i = 1, flat_n do
    if not candidates[i][3] then from_pending[#from_pending + 1] = candidates[i][1] end
  end
end
local run_id = #rows > lapsed_n and server_run_id() or nil
-- active's encoding: a zset born small is a listpack, where every ZADD member and every
-- completion's ZMSCORE / ZREM scans the whole set (at a hundred leases, several times a
-- skiplist's cost: benchmarks/lua_cost.py); a member longer than zset-max-listpack-value (64) turns it into
-- a skiplist, which Redis keeps until the set empties. So a claim of SKIPLIST_FROM jobs
-- or more adding to a listpack (or creating active) adds SKIPLIST_MARK first and removes
-- it in the same call (a smaller claim, a worker's few leases, does not ask): no
-- other client ever sees it (it is not an id: ids have no ':').
local listpack = #rows - lapsed_n >= SKIPLIST_FROM and redis.call('OBJECT', 'ENCODING', active) ~= 'skiplist'

-- writes: the promotions, the picks out of pending and their lanes
if #due > 0 then
  redis.call('ZREM', schedule, unpack(due))
  redis.call('HINCRBY', meta, 'seq', #due)
end
local flat_left = false
for _, job in ipairs(promoted) do
  if not job[4] and not taken[job[1]] then
    redis.call('ZADD', pending, job[2], job[1])
    redis.call('HSET', base .. 'job:' .. job[1], 'state', 'pending')
    flat_left = true
  end
end
if #from_pending > 0 then redis.call('ZREM', pending, unpack(from_pending)) end
if turns then lane_turns_place(base, meta, turns, now) end

local loud = heard(channel, #promoted + #rows)  -- (include/events.lua)
if loud then
  for _, job in ipairs(promoted) do
    redis.call('PUBLISH', channel, '{"event":"promoted","job":"' .. job[1] .. '"}')
  end
end

-- the leases: each claimed row stamped, its token grown by one
local out, n = {}, 0
local at = int_arg(now)  -- number arguments as strings, made once (score.lua: int_arg)
local deadline = int_arg(now + lease)
local leases, m = {}, 0  -- one variadic ZADD for the batch (count <= MAX_COUNT: under unpack's limit)
local started = {}  -- group -> jobs claimed
for i, fields in ipairs(rows) do
  local id, group = picks[i], pgroup[i]
  if fields[1] and not lapsed[i] then
    local row = keys[i]
    local token = tonumber(fields[4] or '0') + 1  -- the fencing token: the row's + 1
    local stamp = token == 1 and '1' or int_arg(token)  -- (a first claim: no format)
    if worker ~= '' then
      redis.call('HSET', row, 'token', stamp, 'state', 'active', 'lease_epoch', run_id,
        'claimed_at', at, 'worker', worker)
    else
      redis.call('HSET', row, 'token', stamp, 'state', 'active', 'lease_epoch', run_id,
        'claimed_at', at)
      redis.call('HDEL', row, 'worker')
    end
    leases[m + 1], leases[m + 2], m = deadline, id, m + 2
    if loud then
      redis.call('PUBLISH', channel,
        '{"event":"active","job":"' .. id .. '","token":' .. stamp .. '}')
    end
    local due = tonumber(fields[5] or fields[6])  -- (a missing field reads as false)
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5], out[n + 6] =
      id, fields[1], token, tonumber(fields[2] or '0'), fields[3],
      due and math.max(now - due, 0) or false
    n = n + 6
    if group then started[group] = (started[group] or 0) + 1 end
  end
end
if m > 0 then
  if listpack then
    redis.call('ZADD', active, 0, SKIPLIST_MARK, unpack(leases, 1, m))
    redis.call('ZREM', active, SKIPLIST_MARK)
  else
    redis.call('ZADD', active, unpack(leases, 1, m))
  end
end
-- an expired pick started nothing: its group's turn and rate window are not spent
for i in pairs(lapsed) do
  if pgroup[i] then
    local g = turns.groups[pgroup[i]]
    g.taken = g.taken - 1
  end
end
if turns then lane_turns_count(base, turns, started, now) end
if qwin and #picks > lapsed_n then
  count_starts(qwin, #picks - lapsed_n, now)
end

-- promoted grouped jobs wait in their lanes (claimed by the next call: a wake token)
for _, job in ipairs(promoted) do
  if job[4] then
    redis.call('HSET', base .. 'job:' .. job[1], 'state', 'pending')
    ready(base, pending, job[1], job[4], job[2])
  end
end
if flat_left and redis.call('ZCARD', pending) > 0 then push_wake(wake, #promoted) end

-- the expired jobs: terminal, never run (include/finished.lua: the completions entry,
-- metrics:expired, the `dead` index with keep_dead, the flow parent told of a failed
-- child); a group whose pick expired takes its turn again (lane_join)
if fin then
  local at_arg = int_arg(now)
  for i, e in ipairs(expired) do
    redis.call('HSET', base .. 'job:' .. e[1], 'state', 'expired', 'finished_at', at_arg)
    redis.call('PUBLISH', channel, '{"event":"expired","job":"' .. e[1] .. '"}')
    finished(fin, i, {error = 'expired'})
  end
  for i in pairs(lapsed) do
    if pgroup[i] then lane_join(base, pgroup[i]) end
  end
end

-- under-filled: tell an idle consumer how long it may block before more may be claimable
if #out < count * 6 then
  local wait = -1
  if #expired > 0 then
    wait = 0  -- expired jobs dropped: claim again now
    push_wake(wake, 1)
  elseif capped and #picks >= want then
    wait = -1  -- at the queue's concurrency: a finish wakes a consumer
  elseif qwin and qwin[2] + #picks >= qwin[3] then
    wait = qwin[4]
  elseif turns and turns.more and #picks < want then
    wait = 0  -- ring members left unread: claim again now
    push_wake(wake, 1)
  else
    local first = redis.call('ZRANGE', schedule, 0, 0, 'WITHSCORES')
    if first[2] then wait = math.max(0, tonumber(first[2]) - now) end
    local reopen = turns and redis.call('ZRANGE', turns.limited, 0, 0, 'WITHSCORES') or {}
    if reopen[2] then
      local ms = math.max(0, tonumber(reopen[2]) - now)
      if wait < 0 or ms < wait then wait = ms end
    end
  end
  out[#out + 1] = wait
end
return out
