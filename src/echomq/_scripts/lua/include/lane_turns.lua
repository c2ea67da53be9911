-- The lane turns of a claim (docs/lanes.md): which jobs a claim takes while group lanes
-- are in play. The ring of groups is served round robin, one job per turn, the ungrouped
-- jobs taking turns as the member '' (no limit); a group leaves the ring at its
-- concurrency limit (leave_active brings it back), for its rate window (into glimited,
-- back when it reopens) or when its lane is empty. At most `want` (and MAX_TURNS) ring
-- members are read: when the ring is longer, each takes one job and goes to the back (the
-- claim then answers 0 ms: claim again now). The back is the ring's last turn, gstate
-- `:turn` (read with the groups' state, written with their counts; a ring from before the
-- field: its back's score). Three calls, because a script reads every key it touches
-- before its first write (docs/lua.md, rule 1):
--   local turns = lane_turns(base, now, want, cands, head_n, gate)  -- with the reads
--   ... the claim's own writes (the promotions, pending) ...
--   lane_turns_place(base, meta, turns, now)  -- the picks leave their lanes; the ring
--   ... the claimed rows and their leases ...
--   lane_turns_count(base, turns, started, now)  -- started: group -> jobs claimed
-- lane_turns answers nil when no group is in the ring or waiting for its window (the
-- claim is flat); else turns: `picks` (the ids to take, in claim order), `pgroup` (a
-- pick's index -> its group; nil: ungrouped), `flat_n` (how many of the picks are the
-- first ungrouped candidates), `more` (ring members left unread), `limited` (the key of
-- the groups waiting for their window). `cands`: the ungrouped candidates' ids in claim
-- order, `head_n` of them read from pending (which may hold more); `gate`: the claim's
-- HMGET of meta (4 group_rate_max, 5 group_rate_ms, 6 group_concurrency, 11
-- group_rate_kind: the defaults of the queue's groups; a group's own rate is `<max>:<ms>`,
-- or `<max>:<ms>:sliding` for a sliding window, include/rate_window.lua).
-- lane_turns_place writes the ring, glimited, the lanes and meta's `lane_jobs`; lane_turns_count the groups' active counts and `:turn` (gstate), their
-- rate windows, and lets a group with nothing left leave (lane_forget).
-- @include lanes
-- @include rate_window
local MAX_TURNS = 100  -- ring members read per call: the distinct groups one claim serves
local MAX_REOPEN = 100  -- groups whose rate window reopened, taken back per call
local NONE = {}  -- an empty list or set never written: a call needs its own only when it fills one
local function lane_turns(base, now, want, cands, head_n, gate)
  local ring, limited = base .. 'gring', base .. 'glimited'
  local lanes_n = redis.call('EXISTS', ring, limited)  -- 2: both exist
  if lanes_n == 0 then return nil end
  local picks, pgroup = {}, {}
  local groups = {}  -- member -> its state (read before the turns)
  local touched = {}  -- the members whose place in the ring this call decides, in order
  local back = {}  -- the members placed at the back of the ring (when not blocked), in order
  local reopened = NONE  -- groups whose rate window reopened (out of glimited)
  local ring_back, more = 0, false  -- the ring's last turn; members left unread

  -- the ungrouped jobs this call may take (flat_more: pending may hold more than it read)
  local flat_total, flat_more = #cands, head_n >= want
  local flat_taken = 0
  local reads = math.min(want, MAX_TURNS)
  -- the turn order: the ring's head (reads + 1 members read: `more` when the last exists);
  -- then, not in the ring yet, the groups whose rate window reopened and the ungrouped
  -- jobs ('')
  local order = redis.call('ZRANGE', ring, 0, reads)
  more = #order > reads
  if more then order[#order] = nil end
  local per = math.ceil(want / math.max(1, #order)) + 1  -- lane ids a first read takes
  local joining, joiners = NONE, NONE
  local reopen = #order == 0 or lanes_n == 2  -- (glimited exists)
  if reopen or flat_total > 0 then
    joining, joiners = {}, {}
    if reopen then reopened = {} end
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
  groups[''] = {name = '', taken = 0, placed = false}
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
        key = false, max = false, period = false, win = false, seen = false, why = false,
        placed = false}
      local max, period, kind = gate[4], gate[5], gate[11]
      if own[3 * i] then
        max, period, kind = string.match(own[3 * i], '^(%d+):(%d+):?(%a*)$')
      end
      if max and period then
        g.max, g.period = tonumber(max), tonumber(period)
        if kind == 'sliding' then
          g.win = slide_window(base .. 'g:' .. name .. ':slide', g.max, g.period, now)
        else
          if not rated then rated, keys = {}, {} end
          rated[#rated + 1] = g
          keys[#keys + 1] = base .. 'g:' .. name .. ':rate'
        end
      end
      groups[name] = g
    end
    if rated then
      local used = redis.call('MGET', unpack(keys))
      for i, g in ipairs(rated) do
        local n = tonumber(used[i] or '0')
        g.win = {keys[i], n, g.max, window_left(now, g.period), n == 0}
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
    if not g.why or g.why == 'unread' then g.placed = true end  -- (else: out of the ring)
  end
  for _, g in ipairs(touched) do
    if g.why == 'empty' and g.name ~= '' then
      redis.call('EXISTS', base .. 'groups')  -- (rule 1: lane_forget may write it)
      break
    end
  end
  return {picks = picks, pgroup = pgroup, flat_n = flat_taken, more = more, ring = ring,
    limited = limited, groups = groups, touched = touched, back = back,
    reopened = reopened, ring_back = ring_back, placing = false}
end

local function lane_turns_place(base, meta, turns, now)
  local lane_taken = 0
  local leaving, parked, placing = NONE, NONE, {}
  for _, g in ipairs(turns.touched) do
    if g.taken > 0 and g.name ~= '' then
      redis.call('ZREMRANGEBYRANK', g.key, 0, g.taken - 1)
      lane_taken = lane_taken + g.taken
    end
    if not g.placed then
      if leaving == NONE then leaving = {} end
      leaving[#leaving + 1] = g.name
      if g.why == 'window' then
        if parked == NONE then parked = {} end
        parked[#parked + 1] = now + g.win[4]
        parked[#parked + 1] = g.name
      end
    end
  end
  local ring_back = turns.ring_back
  for _, g in ipairs(turns.back) do
    if g.placed then
      ring_back = ring_back + 1
      placing[#placing + 1] = ring_back
      placing[#placing + 1] = g.name
    end
  end
  turns.ring_back, turns.placing = ring_back, #placing > 0
  if #turns.reopened > 0 then redis.call('ZREM', turns.limited, unpack(turns.reopened)) end
  if #leaving > 0 then redis.call('ZREM', turns.ring, unpack(leaving)) end
  if #parked > 0 then redis.call('ZADD', turns.limited, unpack(parked)) end
  if #placing > 0 then redis.call('ZADD', turns.ring, unpack(placing)) end
  if lane_taken > 0 then redis.call('HINCRBY', meta, 'lane_jobs', -lane_taken) end
end

local function lane_turns_count(base, turns, started, now)
  local counts = {}
  for name, n in pairs(started) do
    counts[#counts + 1] = name
    counts[#counts + 1] = turns.groups[name].active + n
  end
  if turns.placing then  -- the ring's last turn
    counts[#counts + 1] = ':turn'
    counts[#counts + 1] = turns.ring_back
  end
  if #counts > 0 then redis.call('HSET', base .. 'gstate', unpack(counts)) end
  for _, g in ipairs(turns.touched) do
    if g.win and g.taken > 0 then
      count_starts(g.win, g.taken, now)
    end
    if g.name ~= '' and g.why == 'empty' and not started[g.name] then lane_forget(base, g.name) end
  end
end
