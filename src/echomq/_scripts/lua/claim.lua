--[[
  Claim up to `count` ready jobs and grant each a lease; promote due scheduled jobs first.
  KEYS  1 pending   ZSET  ready ids; score = -priority * 2^40 + seq (higher priority first)
        2 active    ZSET  claimed ids; score = lease deadline ms (server clock)
        3 schedule  ZSET  delayed ids; score = run-at ms
        4 meta      HASH  `paused` = the claim gate; `seq` = the FIFO counter; the limits
                          (`rate_max`, `rate_ms`, `group_rate_max`, `group_rate_ms`)
        5 wake      LIST  wake tokens for idle consumers
  ARGV  1 queue base   2 lease_ms   3 count (1..MAX_COUNT)   4 the claiming worker's id ('': none)
  Returns  flat array: id, payload, token (attempts), failures, trace (the row's `trace`
           field, nil when absent), ... and, when fewer than
           `count` jobs were claimed, one trailing element: ms until more work may be
           claimable (the earliest scheduled job, a group's or the queue's rate window
           reopening; 0 = now), or -1 when nothing is known | {} when paused
  Errors   EMQARG   count is not 1..MAX_COUNT (nothing written; the verb refuses it first)
  Events   promoted (per due scheduled job); active (per claimed job, with its attempt);
           only while the channel has a listener (include/events.lua)
  Moves    scheduled -> pending (due); pending -> active
  Bound    O((count + promoted) * log N); at most MAX_COUNT claimed (include/caps.lua),
           MAX_PROMOTE promoted, MAX_TURNS ring members (groups served) and MAX_REOPEN
           groups whose rate window reopened per call
  The pause gate is read here, first, in the same round trip (not a separate HGET): a
  paused queue answers {} and nothing is written, not even a promotion.
  The queue's rate limit (meta `rate_max` starts per `rate_ms` window, aligned on the
  server clock; docs/lanes.md): a full window answers {ms until it reopens} and writes
  nothing; otherwise at most what the window has left is claimed.
  Reads before writes (docs/lua.md, rule 1): the due ids and their rows, the candidates
  and the rows of those it will take, every lane and group key it touches, all before
  the first write.
  Flat (no group lanes in the ring, none waiting for a window): the jobs taken are the
  `count` lowest scores of pending and the promoted together, as if the promoted were
  added first and `count` popped.
  Lanes (docs/lanes.md): the ring of groups is served round robin, one job per turn, the
  ungrouped jobs taking turns as the member '' (no limit); a group leaves the ring at its
  concurrency limit (leave_active brings it back), for its rate window (into glimited,
  back when it reopens) or when its lane is empty. At most `count` (and MAX_TURNS) ring members
  are read: when the ring is longer, each takes one job and goes to the back, and a claim
  that took fewer than `count` for that answers 0 ms and pushes a wake token. The back is
  the ring's last turn, gstate `:turn` (read with the groups' state, written with their
  counts; a ring from before the field: its back's score).
  Promoted grouped jobs go to their lanes (the `ready` helper) and are claimed next time.
  Every claimed row is stamped with lease_epoch = the server's run_id (INFO server) and
  `worker` = the claiming worker's id (its heartbeat record; deleted when none is given),
  which explain reads to say whether the holder is alive, blocked or gone.
  Promoted jobs beyond what this call takes push a wake token for the other consumers.
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
local MAX_PROMOTE = 100
local MAX_REOPEN = 100
local MAX_TURNS = 100  -- ring members read per call: the distinct groups one claim serves
-- 80 bytes, not an id (a literal: made once, when the script is loaded)
local SKIPLIST_MARK =
  'emq:skiplist:-------------------------------------------------------------------'
local SKIPLIST_FROM = 8  -- claims of fewer jobs leave active as it is (a worker's few leases)
if not count or count < 1 or count > MAX_COUNT then
  return redis.error_reply('EMQARG claim count must be 1..' .. MAX_COUNT)
end

-- the gate: any `paused` field means paused; the backlog is untouched
local gate = redis.call('HMGET', meta, 'paused', 'rate_max', 'rate_ms', 'group_rate_max',
  'group_rate_ms', 'group_concurrency')
if gate[1] then return {} end

local now = now_ms()
local channel = base .. 'events'

-- a rate window (the queue's or a group's): {key, used, max, ms until it reopens, whether
-- it needs its expiry}; a window opens with the first start and ends on a multiple of its
-- period on the server clock
local function window(key, max, period)
  local used = tonumber(redis.call('GET', key) or '0')
  local ttl = used > 0 and redis.call('PTTL', key) or -1
  local fresh = ttl < 0
  if fresh then ttl = (math.floor(now / period) + 1) * period - now end
  return {key, used, max, ttl, fresh}
end
-- a window's starts: a fresh window's key is set to expire at its last ms (Redis expires a
-- key once its clock is past the expiry), so from the window's end on it reads as gone: a
-- claim in the very ms a window ends (when a waiting consumer wakes) sees the next one
-- empty, never the old count (a group would sit out a whole extra window)
local function count_starts(win, n)
  if win[5] then
    redis.call('SET', win[1], n, 'PXAT', int_arg(now + win[4] - 1))
  else
    redis.call('INCRBY', win[1], n)
  end
end

-- the queue's rate window
local qwin = nil
local want = count
if gate[2] then
  qwin = window(base .. 'rate', tonumber(gate[2]), tonumber(gate[3]))
  if qwin[2] >= qwin[3] then return {qwin[4]} end
  want = math.min(count, qwin[3] - qwin[2])
end

-- reads: the due scheduled jobs (each to the back of its band), then the candidates
local due = redis.call('ZRANGEBYSCORE', schedule, '-inf', now, 'LIMIT', 0, MAX_PROMOTE)
local promoted = {}  -- {id, score, promoted?, group}: due ids with a row
local candidates = {}  -- ungrouped: {id, score, promoted?}
if #due > 0 then
  local seq = tonumber(redis.call('HGET', meta, 'seq') or '0')
  for i, id in ipairs(due) do
    local f = redis.call('HMGET', base .. 'job:' .. id, 'priority', 'group')
    if f[1] then
      local job = {id, band_score(f[1], seq + i), true, f[2]}
      promoted[#promoted + 1] = job
      if f[2] then lanes_touch(base, f[2]) else candidates[#candidates + 1] = job end
    end
  end
end
-- cands: the ungrouped candidates' ids in claim order; head_n of them read from pending
local flat_promoted = #candidates
local cands, head_n
if flat_promoted == 0 then  -- (the usual case: pending's order is the claim order)
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
-- are the first ungrouped candidates
local picks, pgroup, flat_n = {}, {}, 0
local ring = base .. 'gring'
local limited = base .. 'glimited'
local lanes_n = redis.call('EXISTS', ring, limited)  -- 2: both exist
local lanes = lanes_n > 0
local groups = {}  -- member -> its state (read before the turns)
local touched = {}  -- the members whose place in the ring this call decides, in order
local placed = {}  -- member -> true: it goes to the back of the ring (else: out of it)
local back = {}  -- the members placed at the back of the ring (when not blocked), in order
local reopened = {}  -- groups whose rate window reopened (out of glimited)
local ring_back, more = 0, false  -- the ring's last turn; members left unread

if not lanes then
  flat_n = math.min(want, #cands)
  picks = flat_n == #cands and cands or {unpack(cands, 1, flat_n)}
else
  -- the ungrouped jobs this call may take (flat_more: pending may hold more than it read)
  local flat_total, flat_more = #cands, head_n >= want
  local flat_taken = 0
  local turns = math.min(want, MAX_TURNS)
  -- the turn order: the ring's head (turns + 1 members read: `more` when the last exists);
  -- then, not in the ring yet, the groups whose rate window reopened and the ungrouped
  -- jobs ('')
  local order = redis.call('ZRANGE', ring, 0, turns)
  more = #order > turns
  if more then order[#order] = nil end
  local per = math.ceil(want / math.max(1, #order)) + 1  -- lane ids a first read takes
  local joining, joiners = {}, {}
  local reopen = #order == 0 or lanes_n == 2  -- (glimited exists)
  if reopen or flat_total > 0 then
    local in_ring = {}
    for k = 1, #order do in_ring[order[k]] = true end
    if reopen then
      for _, name in ipairs(redis.call('ZRANGEBYSCORE', limited, '-inf', now, 'LIMIT', 0, MAX_REOPEN)) do
        reopened[#reopened + 1] = name
        if not in_ring[name] and not joining[name] and not redis.call('ZSCORE', ring, name) then
          joiners[#joiners + 1] = name
          joining[name] = true
        end
      end
    end
    if flat_total > 0 and not in_ring[''] and (not more or not redis.call('ZSCORE', ring, '')) then
      joiners[#joiners + 1] = ''
      joining[''] = true
    end
  end
  if not more then  -- the whole ring is read: the joiners take their turns now
    for _, name in ipairs(joiners) do order[#order + 1] = name end
  end

  -- the state of every group that may have a turn, in one read of `gstate` (and one MGET
  -- of the rate windows): its active count, its limit, its rate; and the ring's last turn
  -- (`:turn`; a ring from before that field: its back's score)
  groups[''] = {name = '', taken = 0}
  local names, fields = {}, {}
  local function add(name)
    if name ~= '' and not groups[name] then
      groups[name] = true
      names[#names + 1] = name
      fields[#fields + 1] = name
      fields[#fields + 1] = name .. ':limit'
      fields[#fields + 1] = name .. ':rate'
    end
  end
  for k = 1, #order do add(order[k]) end
  for k = 1, #joiners do add(joiners[k]) end
  if #order > 0 or #joiners > 0 then
    fields[#fields + 1] = ':turn'
    local own = redis.call('HMGET', base .. 'gstate', unpack(fields))
    ring_back = tonumber(own[#fields])
    if not ring_back then
      ring_back = tonumber(redis.call('ZRANGE', ring, -1, -1, 'WITHSCORES')[2]) or 0
    end
    local rated, keys = nil, nil
    for i, name in ipairs(names) do
      -- every field in the constructor: one allocation, no rehash as the turns fill it
      local g = {name = name, taken = 0, per = per, active = tonumber(own[3 * i - 2] or '0'),
        limit = tonumber(own[3 * i - 1] or gate[6]), lane = false, lane_end = false,
        key = false, max = false, period = false, win = false, seen = false, why = false}
      local max, period = gate[4], gate[5]
      if own[3 * i] then max, period = string.match(own[3 * i], '^(%d+):(%d+)$') end
      if max and period then
        g.max, g.period = tonumber(max), tonumber(period)
        if not rated then rated, keys = {}, {} end
        rated[#rated + 1] = g
        keys[#keys + 1] = base .. 'g:' .. name .. ':rate'
      end
      groups[name] = g
    end
    if rated then
      local used = redis.call('MGET', unpack(keys))
      for i, g in ipairs(rated) do
        local n = tonumber(used[i] or '0')
        g.win = {keys[i], n, g.max, (math.floor(now / g.period) + 1) * g.period - now, n == 0}
      end
    end
  end
  -- the group's lane read far enough to know whether it holds a job after `taken`
  local function has_next(g)
    local lane = g.lane
    if lane and g.taken < #lane then return true end
    if g.lane_end then return false end
    if not lane then g.key = lane_key(base, g.name) end
    local n = lane and #lane or 0
    local ids = redis.call('ZRANGE', g.key, n, n + g.per - 1)
    if lane then
      for _, id in ipairs(ids) do lane[#lane + 1] = id end
    else
      g.lane = ids
    end
    g.lane_end = #ids < g.per
    g.per = g.per * 2
    return g.taken < #g.lane
  end
  -- may the member start one more job? nil, or why not: 'empty' | 'full' | 'window'
  local function blocked(g)
    if g.name == '' then
      if flat_taken < flat_total then return nil end
      return flat_more and 'unread' or 'empty'  -- unread: more than this call read
    end
    if g.limit and g.active + g.taken >= g.limit then return 'full' end
    if g.win and g.win[2] + g.taken >= g.win[3] then return 'window' end
    if not has_next(g) then return 'empty' end
    return nil
  end
  local function touch(g)
    if not g.seen then
      g.seen = true
      touched[#touched + 1] = g
    end
  end

  -- one job per turn; with the whole ring read, a member that took a job takes its next
  -- turn at the back, so the turns cycle until `want` jobs are picked
  local i = 1
  while #picks < want and i <= #order do
    local g = groups[order[i]]
    i = i + 1
    touch(g)
    g.why = blocked(g)
    if not g.why then
      g.taken = g.taken + 1
      if g.name == '' then
        flat_taken = flat_taken + 1
        picks[#picks + 1] = cands[flat_taken]
      else
        picks[#picks + 1] = g.lane[g.taken]
        pgroup[#picks] = g.name
      end
      if not more then order[#order + 1] = g.name end
    end
  end
  -- the new back of the ring, in order: with the whole ring read, the rest of the turn
  -- order (a member never looked at keeps its place); else the joiners, then the members
  -- that had their turn
  if more then
    for _, name in ipairs(joiners) do back[#back + 1] = groups[name] end
    for _, g in ipairs(touched) do back[#back + 1] = g end
  else
    for k = i, #order do
      local g = groups[order[k]]
      if g.seen or joining[g.name] then back[#back + 1] = g end
    end
  end
  for _, g in ipairs(back) do
    touch(g)
    g.why = blocked(g)
    if not g.why or g.why == 'unread' then placed[g.name] = true end
  end
  for _, g in ipairs(touched) do
    if g.why == 'empty' and g.name ~= '' then
      redis.call('EXISTS', base .. 'groups')  -- (rule 1: lane_forget may write it)
      break
    end
  end
  flat_n = flat_taken
end

-- the rows of the picks (an id with no row leaves its set and is not claimed)
local rows, keys, taken, from_pending = {}, {}, {}, {}
for i, id in ipairs(picks) do
  local row = base .. 'job:' .. id
  keys[i] = row
  rows[i] = redis.call('HMGET', row, 'payload', 'failures', 'trace', 'attempts')
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
local run_id = #rows > 0 and server_run_id() or nil
-- active's encoding: a zset born small is a listpack, where every ZADD member and every
-- completion's ZMSCORE / ZREM scans the whole set (~1.7 us a member at 100 leases, vs
-- ~0.25 in a skiplist); a member longer than zset-max-listpack-value (64) turns it into
-- a skiplist, which Redis keeps until the set empties. So a claim of SKIPLIST_FROM jobs
-- or more adding to a listpack (or creating active) adds SKIPLIST_MARK first and removes
-- it in the same call (a smaller claim, a worker's few leases, does not ask): no
-- other client ever sees it (it is not an id: ids have no ':').
local listpack = #rows >= SKIPLIST_FROM and redis.call('OBJECT', 'ENCODING', active) ~= 'skiplist'

-- writes
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

-- lanes: the picked jobs leave their lanes; each member's place in the ring
local lane_taken = 0
local leaving, parked, placing = {}, {}, {}
for _, g in ipairs(touched) do
  if g.taken > 0 and g.name ~= '' then
    redis.call('ZREMRANGEBYRANK', g.key, 0, g.taken - 1)
    lane_taken = lane_taken + g.taken
  end
  if not placed[g.name] then
    leaving[#leaving + 1] = g.name
    if g.why == 'window' then
      parked[#parked + 1] = now + g.win[4]
      parked[#parked + 1] = g.name
    end
  end
end
for _, g in ipairs(back) do
  if placed[g.name] then
    ring_back = ring_back + 1
    placing[#placing + 1] = ring_back
    placing[#placing + 1] = g.name
  end
end
if #reopened > 0 then redis.call('ZREM', limited, unpack(reopened)) end
if #leaving > 0 then redis.call('ZREM', ring, unpack(leaving)) end
if #parked > 0 then redis.call('ZADD', limited, unpack(parked)) end
if #placing > 0 then redis.call('ZADD', ring, unpack(placing)) end
if lane_taken > 0 then redis.call('HINCRBY', meta, 'lane_jobs', -lane_taken) end

local loud = heard(channel, #promoted + #rows)  -- (include/events.lua)
if loud then
  for _, job in ipairs(promoted) do
    redis.call('PUBLISH', channel, '{"event":"promoted","job":"' .. job[1] .. '"}')
  end
end

local out, n = {}, 0
local at = int_arg(now)  -- number arguments as strings, made once (score.lua: int_arg)
local deadline = int_arg(now + lease)
local leases, m = {}, 0  -- one variadic ZADD for the batch (count <= 250: under unpack's limit)
local started = {}  -- group -> jobs claimed
for i, fields in ipairs(rows) do
  local id, group = picks[i], pgroup[i]
  if fields[1] then
    local row = keys[i]
    local token = tonumber(fields[4] or '0') + 1  -- the fencing token: attempts + 1
    local attempt = token == 1 and '1' or int_arg(token)  -- (a first claim: no format)
    if worker ~= '' then
      redis.call('HSET', row, 'attempts', attempt, 'state', 'active', 'lease_epoch', run_id,
        'claimed_at', at, 'worker', worker)
    else
      redis.call('HSET', row, 'attempts', attempt, 'state', 'active', 'lease_epoch', run_id,
        'claimed_at', at)
      redis.call('HDEL', row, 'worker')
    end
    leases[m + 1], leases[m + 2], m = deadline, id, m + 2
    if loud then
      redis.call('PUBLISH', channel,
        '{"event":"active","job":"' .. id .. '","attempt":' .. attempt .. '}')
    end
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] =
      id, fields[1], token, tonumber(fields[2] or '0'), fields[3]
    n = n + 5
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
local counts = {}
for name, n in pairs(started) do
  counts[#counts + 1] = name
  counts[#counts + 1] = groups[name].active + n
end
if #placing > 0 then  -- the ring's last turn
  counts[#counts + 1] = ':turn'
  counts[#counts + 1] = ring_back
end
if #counts > 0 then redis.call('HSET', base .. 'gstate', unpack(counts)) end
for _, g in ipairs(touched) do
  if g.win and g.taken > 0 then
    count_starts(g.win, g.taken)
  end
  if g.name ~= '' and g.why == 'empty' and not started[g.name] then lane_forget(base, g.name) end
end
if qwin and #picks > 0 then
  count_starts(qwin, #picks)
end

-- promoted grouped jobs wait in their lanes (claimed by the next call: a wake token)
for _, job in ipairs(promoted) do
  if job[4] then
    redis.call('HSET', base .. 'job:' .. job[1], 'state', 'pending')
    ready(base, pending, job[1], job[4], job[2])
  end
end
if flat_left and redis.call('ZCARD', pending) > 0 then push_wake(wake, #promoted) end

-- under-filled: tell an idle consumer how long it may block before more may be claimable
if #out < count * 5 then
  local wait = -1
  if qwin and qwin[2] + #picks >= qwin[3] then
    wait = qwin[4]
  elseif more and #picks < want then
    wait = 0  -- ring members left unread: claim again now
    push_wake(wake, 1)
  else
    local first = redis.call('ZRANGE', schedule, 0, 0, 'WITHSCORES')
    if first[2] then wait = math.max(0, tonumber(first[2]) - now) end
    local reopen = lanes and redis.call('ZRANGE', limited, 0, 0, 'WITHSCORES') or {}
    if reopen[2] then
      local ms = math.max(0, tonumber(reopen[2]) - now)
      if wait < 0 or ms < wait then wait = ms end
    end
  end
  out[#out + 1] = wait
end
return out
