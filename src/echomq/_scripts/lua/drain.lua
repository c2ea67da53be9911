--[[
  One bounded step of a drain: delete up to `budget` waiting jobs - pending first, then the
  group lanes, then (when asked) scheduled - each with its row, logs and lock. Active jobs
  and every other key (the repeat registry included) are untouched. The verb loops until
  none remain.
  KEYS  1 pending    ZSET  ready ids
        2 schedule   ZSET  delayed ids
        3 meta       HASH  `lane_jobs`: the jobs waiting in lanes
        4 groups     ZSET  the groups with waiting or active jobs (score 0, by name)
  ARGV  1 queue base (emq:{q}:)   2 '1' = drain the schedule set too   3 budget (1..MAX_BUDGET)
        4 the lanes' cursor: the last group this drain visited ('' = from the first)
  Returns  {deleted, remaining, cursor}: the jobs deleted by this call, the jobs still
           waiting in the drained sets and lanes (0: the drain is done), and the cursor
           for the next step ('' once every lane has been visited)
  Errors   EMQARG   the budget is not 1..MAX_BUDGET (nothing written; the verb refuses it first)
           EMQNOQUEUE  the queue has no meta hash: it does not exist (nothing written)
  Events   drained {"event":"drained","job":"","count":n,"remaining":r} when n > 0
  Moves    pending | scheduled -> (none)
  Bound    O(budget * log N); at most MAX_BUDGET jobs and MAX_BUDGET groups per
           call (include/caps.lua)
  The ids are taken from the head of each set and lane and removed by rank
  (ZREMRANGEBYRANK); the rows, logs and locks are read (one EXISTS per 100 jobs) before
  the first write, then go in one DEL per 100 jobs (so no unpack is longer than 300 keys).
  Lanes are visited in name order from the cursor (a lane drained in part is visited
  again next step); an emptied lane leaves the ring, and the group leaves the registry
  when none of its jobs is active (docs/lanes.md).
]]
-- @include caps
-- @include lanes
local pending, schedule, meta, registry = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local base, with_schedule, budget = ARGV[1], ARGV[2] == '1', tonumber(ARGV[3])
local cursor = ARGV[4]
if not budget or budget < 1 or budget > MAX_BUDGET then
  return redis.error_reply('EMQARG drain budget must be 1..' .. MAX_BUDGET)
end
if redis.call('EXISTS', meta) == 0 then  -- no queue: a typo creates none (nothing written)
  return redis.error_reply('EMQNOQUEUE ' .. string.match(meta, '{(.-)}'))
end

-- reads first (docs/lua.md, rule 1): the ids to delete, and every row, log list and lock
-- of theirs (a key another node holds mid-reshard fails the call here, having written
-- nothing)
local ids = redis.call('ZRANGE', pending, 0, budget - 1)
local ring = base .. 'gring'
local ring_flat = redis.call('ZSCORE', ring, '')  -- the ungrouped jobs' turn (docs/lanes.md)
local left = budget - #ids
local lanes, lane_ids = {}, {}  -- {group, n}: the lanes this step takes jobs from
local next_cursor = cursor
if left > 0 then
  local from = cursor == '' and '-' or '(' .. cursor
  local names = redis.call('ZRANGEBYLEX', registry, from, '+', 'LIMIT', 0, MAX_BUDGET)
  local stopped = false  -- the budget ran out before the last name
  for _, name in ipairs(names) do
    if left == 0 then
      stopped = true
      break
    end
    lanes_touch(base, name)
    local lane = lane_key(base, name)
    local card = redis.call('ZCARD', lane)
    if card > 0 then
      local some = redis.call('ZRANGE', lane, 0, left - 1)
      for _, id in ipairs(some) do lane_ids[#lane_ids + 1] = id end
      left = left - #some
      lanes[#lanes + 1] = {name, #some}
      if #some < card then  -- drained in part: the next step starts with this lane
        stopped = true
        break
      end
    end
    next_cursor = name
  end
  if not stopped and #names < MAX_BUDGET then next_cursor = '' end
end
local scheduled = {}
if with_schedule and left > 0 then
  scheduled = redis.call('ZRANGE', schedule, 0, left - 1)
end
local doomed = {}  -- the per-job keys, in groups of 100 jobs (one EXISTS and one DEL each)
for _, list in ipairs({ids, lane_ids, scheduled}) do
  for _, id in ipairs(list) do
    local jk = base .. 'job:' .. id
    local group = doomed[#doomed]
    if not group or #group == 300 then
      group = {}
      doomed[#doomed + 1] = group
    end
    group[#group + 1] = jk
    group[#group + 1] = jk .. ':logs'
    group[#group + 1] = jk .. ':lock'
  end
end
for _, group in ipairs(doomed) do redis.call('EXISTS', unpack(group)) end

for _, group in ipairs(doomed) do redis.call('DEL', unpack(group)) end
if #ids > 0 then redis.call('ZREMRANGEBYRANK', pending, 0, #ids - 1) end
if ring_flat and redis.call('ZCARD', pending) == 0 then redis.call('ZREM', ring, '') end
for _, lane in ipairs(lanes) do
  redis.call('ZREMRANGEBYRANK', lane_key(base, lane[1]), 0, lane[2] - 1)
  lane_forget(base, lane[1])
end
if #lane_ids > 0 then redis.call('HINCRBY', meta, 'lane_jobs', -#lane_ids) end
if #scheduled > 0 then redis.call('ZREMRANGEBYRANK', schedule, 0, #scheduled - 1) end
local n = #ids + #lane_ids + #scheduled
local remaining = redis.call('ZCARD', pending) + tonumber(redis.call('HGET', meta, 'lane_jobs') or '0')
if with_schedule then remaining = remaining + redis.call('ZCARD', schedule) end
if n > 0 then
  redis.call('PUBLISH', base .. 'events',
    cjson.encode({event = 'drained', job = '', count = n, remaining = remaining}))
end
return {n, remaining, next_cursor}
