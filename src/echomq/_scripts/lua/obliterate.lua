--[[
  Obliterate a paused queue, bounded: delete up to `budget` jobs (rows, logs, locks) from
  the state sets per call, then the leftover keys the caller found by SCAN, then - when
  asked to finish and every set is empty - the queue's own keys, meta last.
  KEYS  1 meta        HASH  `paused` must be set
        2 active      ZSET  refused while non-empty unless forced
        3 pending     ZSET
        4 schedule    ZSET
        5 dead        ZSET
        6 completed   ZSET
        7 waiting     ZSET  flow parents (docs/flows.md)
        8 wake        LIST
        9 metrics:completed  HASH
       10 metrics:dead       HASH
       11 sweep_guard STRING
       12.. leftover keys of this queue (found by the caller's SCAN), deleted as found
        derived from the base: cancelled (ZSET, a state set like completed), the lanes
  ARGV  1 queue base (emq:{q}:)   2 '1' = force (active jobs too)   3 budget (1..MAX_BUDGET jobs)
        4 '1' = finish: delete the queue's own keys when every set is empty
  Returns  {status, deleted}: status 1 = the budget is spent, call again;
           2 = every set is empty (leftovers may remain); 0 = finished, meta deleted
  Errors   EMQARG                       the budget is not 1..MAX_BUDGET, or more leftover keys
                                        than the budget (nothing written)
           EMQNOQUEUE                   the queue has no meta hash: it does not exist
                                        (nothing written)
           EMQSTATE not paused          the queue is not paused (nothing written)
           EMQSTATE active jobs present  active members and not forced (nothing written)
  Events   (none)
  Moves    pending | scheduled | active | dead | completed | cancelled | waiting
           | expired -> (none)
  Bound    O(budget * log N); at most MAX_BUDGET jobs or keys per call
           (include/caps.lua)
  Ids are taken from the head of each set and removed by rank (ZREMRANGEBYRANK); rows,
  logs and locks are read (one EXISTS per 80 jobs) before the first write, then go in one
  DEL per 80 jobs (no unpack is longer than 480 keys: a job's row, logs, lock and a flow
  parent's children, results and remote lists). After the state sets, the group
  lanes (docs/lanes.md), found through the registry `groups`: a lane's jobs cost their
  number, a group with none costs 1; an emptied lane leaves the registry. The lanes'
  other keys (ring, records, windows) go with the leftovers.
]]
-- @include caps
-- @include lanes
local meta, active = KEYS[1], KEYS[2]
local base, force, budget = ARGV[1], ARGV[2] == '1', tonumber(ARGV[3])
local finish = ARGV[4] == '1'

-- checks, in order: arguments, paused, active (unless forced)
if not budget or budget < 1 or budget > MAX_BUDGET or #KEYS - 11 > budget then
  return redis.error_reply('EMQARG obliterate budget must be 1..' .. MAX_BUDGET)
end
if redis.call('EXISTS', meta) == 0 then  -- no queue: a typo creates none (nothing written)
  return redis.error_reply('EMQNOQUEUE ' .. string.match(meta, '{(.-)}'))
end
if redis.call('HEXISTS', meta, 'paused') == 0 then
  return redis.error_reply('EMQSTATE not paused: pause the queue first')
end
if not force and redis.call('ZCARD', active) > 0 then
  return redis.error_reply('EMQSTATE active jobs present: wait, or force')
end

-- the plan, read before any write (docs/lua.md, rule 1): the leftovers count first, then
-- the state sets, active first, each job a unit of the budget; every row, log list and
-- lock to delete is read (one EXISTS per 80 jobs)
local leftovers = #KEYS - 11
budget = budget - leftovers
local plan, more = {}, false  -- plan: {set, ids}; more: the budget ran out first
local sets = {KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], base .. 'cancelled', KEYS[7]}
for _, set in ipairs(sets) do
  local card = redis.call('ZCARD', set)
  if card > 0 then
    if budget <= 0 then
      more = true
      break
    end
    local ids = redis.call('ZRANGE', set, 0, budget - 1)
    plan[#plan + 1] = {set, ids}
    budget = budget - #ids
    if card > #ids then
      more = true
      break
    end
  end
end
local registry, emptied = base .. 'groups', {}  -- emptied: groups whose lane is consumed
if not more then
  local names = redis.call('ZRANGE', registry, 0, math.max(budget, 1) - 1)
  for _, name in ipairs(names) do
    if budget <= 0 then
      more = true
      break
    end
    lanes_touch(base, name)
    local lane = lane_key(base, name)
    local card = redis.call('ZCARD', lane)
    local ids = card > 0 and redis.call('ZRANGE', lane, 0, budget - 1) or {}
    if #ids > 0 then plan[#plan + 1] = {lane, ids} end
    budget = budget - math.max(1, #ids)
    if #ids < card then
      more = true
      break
    end
    emptied[#emptied + 1] = name
  end
  if not more and redis.call('ZCARD', registry) > #emptied then more = true end
end
local groups = {}  -- the per-job keys, 80 jobs a group
for _, step in ipairs(plan) do
  local group = {}
  for n, id in ipairs(step[2]) do
    local jk = base .. 'job:' .. id
    group[#group + 1] = jk
    group[#group + 1] = jk .. ':logs'
    group[#group + 1] = jk .. ':lock'
    group[#group + 1] = jk .. ':children'
    group[#group + 1] = jk .. ':results'
    group[#group + 1] = jk .. ':remote'
    if n % 80 == 0 or n == #step[2] then
      groups[#groups + 1] = group
      group = {}
    end
  end
end
for _, group in ipairs(groups) do redis.call('EXISTS', unpack(group)) end

-- writes: the leftovers the caller found (rows without a set, other verbs' keys), then
-- the planned jobs
local deleted = leftovers
for i = 12, #KEYS do redis.call('DEL', KEYS[i]) end
for _, group in ipairs(groups) do redis.call('DEL', unpack(group)) end
for _, step in ipairs(plan) do
  redis.call('ZREMRANGEBYRANK', step[1], 0, #step[2] - 1)
  deleted = deleted + #step[2]
end
for _, name in ipairs(emptied) do redis.call('ZREM', registry, name) end
if more then return {1, deleted} end
if not finish then return {2, deleted} end
redis.call('DEL', KEYS[8], KEYS[9], KEYS[10], KEYS[11], meta)
return {0, deleted}
