--[[
  Add a flow (a tree of parent and child jobs, docs/flows.md) in one call, all or nothing:
  leaves go to pending (or, delayed, to the schedule), parents wait in `waiting` with a
  counter of open children.
  KEYS  1 pending   ZSET  ready ids; score = -priority * 2^40 + seq
        2 waiting   ZSET  flow parents with open children; score = created ms
        3 meta      HASH  seq = the FIFO counter; schema_version (set if absent)
        4 wake      LIST  wake tokens for idle consumers
        5 schedule  ZSET  delayed ids; score = run-at ms (a delayed leaf)
  ARGV  1 queue base (emq:{q}:)   2 number of nodes n (1..MAX_FLOW)   3 number of held
        parents to release r (0..MAX_FLOW)   then r parent ids   then n groups of 17: id,
        payload, priority, max_attempts, task, keep_result ms, keep_dead ms ('' = none),
        parent id ('' = a root), parent queue ('' = this queue; else the parent's queue,
        whose keys this call cannot touch), policy (fail | ignore | continue), feed (none |
        one | all), children in this call ('' = a leaf), held ('1' = more children come in
        later calls; 'r' = a stub: a child on another queue, written there, only listed
        and counted here as its parent's child; its parent queue field is then the
        child's own queue, kept in the parent's `:remote` hash), group ('' = none: a
        grouped job waits in its group's lane when it is ready, docs/lanes.md), delay ms
        (0 = none; a leaf only: it waits in the schedule until then), errback ('' =
        none: the error callback's spec, written to the row's `errback`,
        include/link_error.lua), expires ('' = none; '<ms>' after now, '@<ms>' a server
        epoch ms: the row's `expires_at`, include/expiry.lua)   then, optionally, the
        flow's root id: a row of it on this queue (written by this call or an earlier one) counts the page in its
        `pages` field (`flows --held` shows it)   then, for a spawn (a running job adds
        children: docs/flows.md "Dynamic children"), 5 more: the running parent's id,
        its token, its step field (step:<name>), the step's record, the policy of its
        children (set if it has none)
  Returns  n (the number of nodes added) | a spawn: 0 the step is written already (an
           earlier run spawned them: nothing written) | -1 the parent has no row | -2 a
           stale token | -3 the parent is not in active
  Errors   EMQDUP <id>   a row with that id exists (or the id repeats in the call)
           EMQARG        n or r out of range, or the argument count does not match
           EMQSCHEMA     the queue's layout version is not this echomq's (nothing written)
           EMQSTATE      a parent outside the call (or one to release) is not a held
                         waiting parent, or a node's parent comes after it
  Events   enqueued (a leaf) | scheduled (a delayed leaf) | waiting (a parent) | ready (a
           released parent that may run); on the workers' channel (emq:{q}:control) one
           scheduled {delay_ms} per call with delayed leaves: the soonest delay
  Moves    (none) -> pending | scheduled | waiting; waiting -> pending (a released held
           parent)
  Bound    O((n + r) * log N); at most MAX_FLOW nodes and MAX_FLOW releases per
           call (include/caps.lua)
  Nodes come parents first. A node whose parent is not in the call attaches to an existing
  parent that is held (`held` = 1: its pages are still being added), whose `open` and
  `kids` grow by one. A held parent's `open` counts one for the hold, so it cannot become
  ready before the call that releases it (the last page); releasing drops that one and
  makes it pending when nothing is open (or, policy `fail`, a child already failed).
  A child on another queue (docs/flows.md "Across queues") is two nodes: its stub here,
  on its parent's queue (no row; the parent lists and counts it), and its row in the
  other queue's call (with `parent_queue`: its parent is not checked, nor written, by
  that call; its finish reaches the parent through its queue's outbox).
  Every check comes before the first write.
]]
-- @include caps
-- @include time
-- @include score
-- @include wake
-- @include schema
-- @include lanes
-- @include ready
-- @include finished
-- @include expiry
local pending, waiting, meta, wake, schedule = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local base = ARGV[1]
local n, r = tonumber(ARGV[2]), tonumber(ARGV[3])
local GROUP = 17
local tail = n and r and #ARGV - 3 - r - n * GROUP
if not n or not r or n < 1 or n > MAX_FLOW or r < 0 or r > MAX_FLOW
    or (tail ~= 0 and tail ~= 1 and tail ~= 6) then
  return redis.error_reply('EMQARG add_flow takes 1..' .. MAX_FLOW .. ' nodes of ' .. GROUP
    .. ' arguments')
end
local first = 4 + r  -- ARGV index of the first node
local root = ARGV[4 + r + n * GROUP]  -- the flow's root (nil: not given)

-- a spawn: the running parent, fenced by its token; its step written once
local running = nil
if tail == 6 then
  local t = 5 + r + n * GROUP
  running = {id = ARGV[t], token = ARGV[t + 1], step = ARGV[t + 2], record = ARGV[t + 3],
    policy = ARGV[t + 4], row = base .. 'job:' .. ARGV[t]}
  local f = redis.call('HMGET', running.row, 'token', running.step)
  if not f[1] then return -1 end
  if f[1] ~= running.token then return -2 end
  if not redis.call('ZSCORE', base .. 'active', running.id) then return -3 end
  if f[2] then return 0 end
  redis.call('EXISTS', running.row .. ':children', running.row .. ':remote')
  root = nil
end

-- checks first: new ids, parents before children, outside parents held and waiting
local function held_parent(id)
  local f = redis.call('HMGET', base .. 'job:' .. id, 'state', 'held')
  return f[1] == 'waiting' and f[2] == '1'
end
local seen, outside, leaves = {}, {}, 0
if running then outside[running.id] = true end
for i = 0, n - 1 do
  local j = first + i * GROUP
  local id, parent, stub = ARGV[j], ARGV[j + 7], ARGV[j + 12] == 'r'
  if stub then redis.call('EXISTS', base .. 'job:' .. parent .. ':remote') end
  if seen[id] or (not stub and redis.call('EXISTS', base .. 'job:' .. id) == 1) then
    return redis.error_reply('EMQDUP job exists: ' .. id)
  end
  if stub and (parent == '' or ARGV[j + 8] == '' or ARGV[j + 11] ~= '') then
    return redis.error_reply('EMQARG a stub names its parent and its own queue, and is a leaf here')
  end
  if ARGV[j + 8] ~= '' and not stub then  -- its parent is on another queue: neither checked nor written
    if parent == '' or seen[parent] then
      return redis.error_reply('EMQARG a parent queue needs a parent outside this call')
    end
  elseif parent ~= '' and not seen[parent] and not outside[parent] then
    if not held_parent(parent) then
      return redis.error_reply('EMQSTATE parent ' .. parent .. ' is not a held waiting parent')
    end
    outside[parent] = true
    redis.call('EXISTS', base .. 'job:' .. parent .. ':children')
  end
  seen[id] = true
  if ARGV[j + 11] == '' and ARGV[j + 12] == '' then leaves = leaves + 1 end
  if ARGV[j + 13] ~= '' then lanes_touch(base, ARGV[j + 13]) end
end
local releases = {}
for k = 4, 3 + r do
  local id = ARGV[k]
  if not seen[id] then
    if not held_parent(id) then
      return redis.error_reply('EMQSTATE parent ' .. id .. ' is not a held waiting parent')
    end
    local f = redis.call('HMGET', base .. 'job:' .. id, 'policy', 'priority', 'failed', 'group')
    if f[4] then lanes_touch(base, f[4]) end
    releases[#releases + 1] = {id = id, row = base .. 'job:' .. id, state = 'waiting',
      held = false, policy = f[1] or 'fail', priority = f[2] or '0',
      failed = tonumber(f[3] or '0'), group = f[4]}
  end
end

local counted = root and (seen[root] or redis.call('EXISTS', base .. 'job:' .. root) == 1)

local now = now_ms()
open_queue(meta)
local channel = base .. 'events'
local seq = 0
if leaves > 0 then seq = redis.call('HINCRBY', meta, 'seq', leaves) - leaves end
local OPTIONAL = {'task', 'keep_result', 'keep_dead'}
local expiring = false  -- a node has a deadline: the queue's `expiring` flag
local flat = 0  -- leaves placed in the flat pending set (one wake token each, capped)
local soonest = nil  -- the shortest delay of the call's delayed leaves
for i = 0, n - 1 do
  local j = first + i * GROUP
  local id, payload, priority, max_attempts = ARGV[j], ARGV[j + 1], ARGV[j + 2], ARGV[j + 3]
  local parent, kids, held, parent_queue = ARGV[j + 7], ARGV[j + 11], ARGV[j + 12], ARGV[j + 8]
  local stub, group = held == 'r', ARGV[j + 13]
  local delay = tonumber(ARGV[j + 14]) or 0
  local row = base .. 'job:' .. id
  -- the options at their default have no field (docs/keyspace.md, "The row")
  local fields = {'payload', payload, 'token', 0, 'priority', priority, 'created_at', now}
  if max_attempts ~= '1' then
    fields[#fields + 1], fields[#fields + 2] = 'max_attempts', max_attempts
  end
  for k, name in ipairs(OPTIONAL) do
    if ARGV[j + 3 + k] ~= '' then
      fields[#fields + 1] = name
      fields[#fields + 1] = ARGV[j + 3 + k]
    end
  end
  if group ~= '' then
    fields[#fields + 1] = 'group'
    fields[#fields + 1] = group
  end
  if ARGV[j + 15] ~= '' then
    fields[#fields + 1] = 'errback'
    fields[#fields + 1] = ARGV[j + 15]
  end
  if ARGV[j + 16] ~= '' and not stub then
    fields[#fields + 1] = 'expires_at'
    fields[#fields + 1] = string.format('%d', expiry_at(ARGV[j + 16], now))
    expiring = true
  end
  if parent ~= '' then
    fields[#fields + 1] = 'parent'
    fields[#fields + 1] = parent
    if stub then  -- listed, counted, and where it lives: the parent's `:remote` hash
      redis.call('RPUSH', base .. 'job:' .. parent .. ':children', id)
      redis.call('HSET', base .. 'job:' .. parent .. ':remote', id, parent_queue)
      if outside[parent] then
        redis.call('HINCRBY', base .. 'job:' .. parent, 'open', 1)
        redis.call('HINCRBY', base .. 'job:' .. parent, 'kids', 1)
      end
    elseif parent_queue ~= '' then
      fields[#fields + 1] = 'parent_queue'
      fields[#fields + 1] = parent_queue
    else
      redis.call('RPUSH', base .. 'job:' .. parent .. ':children', id)
      if outside[parent] then
        redis.call('HINCRBY', base .. 'job:' .. parent, 'open', 1)
        redis.call('HINCRBY', base .. 'job:' .. parent, 'kids', 1)
      end
    end
  end
  if held == 'r' then
    -- a stub: listed and counted above; its row is on its own queue
  elseif kids ~= '' or held == '1' then
    local count = tonumber(kids) or 0
    local open = count + (held == '1' and 1 or 0)
    redis.call('HSET', row, 'state', 'waiting', 'open', open, 'kids', count, 'failed', 0,
      'policy', ARGV[j + 9], 'feed', ARGV[j + 10], unpack(fields))
    if held == '1' then redis.call('HSET', row, 'held', '1') end
    redis.call('ZADD', waiting, now, id)
    redis.call('PUBLISH', channel, '{"event":"waiting","job":"' .. id .. '"}')
  elseif delay > 0 then
    local run_at = now + delay
    redis.call('HSET', row, 'state', 'scheduled', 'run_at', run_at, unpack(fields))
    redis.call('ZADD', schedule, run_at, id)
    redis.call('PUBLISH', channel, '{"event":"scheduled","job":"' .. id .. '"}')
    if not soonest or delay < soonest then soonest = delay end
  else
    seq = seq + 1
    redis.call('HSET', row, 'state', 'pending', unpack(fields))
    if group ~= '' then
      ready(base, pending, id, group, band_score(priority, seq))
    else
      redis.call('ZADD', pending, band_score(priority, seq), id)
      flat = flat + 1
    end
    redis.call('PUBLISH', channel, '{"event":"enqueued","job":"' .. id .. '"}')
  end
end
if flat > 0 then push_wake(wake, flat) end
if expiring then redis.call('HSET', meta, 'expiring', '1') end
if soonest then
  redis.call('PUBLISH', base .. 'control', '{"event":"scheduled","delay_ms":' .. soonest .. '}')
end
if counted then redis.call('HINCRBY', base .. 'job:' .. root, 'pages', 1) end
if running then
  redis.call('HSET', running.row, running.step, running.record)
  redis.call('HSETNX', running.row, 'policy', running.policy)
  redis.call('HSETNX', running.row, 'feed', 'none')
  redis.call('HSETNX', running.row, 'failed', 0)
end
for _, p in ipairs(releases) do
  redis.call('HDEL', p.row, 'held')
  local open = redis.call('HINCRBY', p.row, 'open', -1)
  if open <= 0 or (p.policy == 'fail' and p.failed > 0) then flow_ready(base, p) end
end
return n
