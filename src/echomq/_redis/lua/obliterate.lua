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
        7 wake        LIST
        8 metrics:completed  HASH
        9 metrics:failed     HASH
       10 sweep_guard STRING
       11.. leftover keys of this queue (found by the caller's SCAN), deleted as found
  ARGV  1 queue base (emq:{q}:)   2 '1' = force (active jobs too)   3 budget (1..500 jobs)
        4 '1' = finish: delete the queue's own keys when every set is empty
  Returns  {status, deleted}: status 1 = the budget is spent, call again;
           2 = every set is empty (leftovers may remain); 0 = finished, meta deleted
  Errors   EMQARG                       the budget is not 1..500, or more leftover keys
                                        than the budget (nothing written)
           EMQSTATE not paused          the queue is not paused (nothing written)
           EMQSTATE active jobs present  active members and not forced (nothing written)
  Events   (none)
  Moves    pending | scheduled | active | dead | completed -> (none)
  Bound    O(budget * log N); at most 500 jobs or keys per call (validate.MAX_BUDGET)
  Ids are taken from the head of each set and removed by rank (ZREMRANGEBYRANK); rows,
  logs and locks go in one DEL per 100 jobs (no unpack is longer than 300 keys).
]]
local MAX_BUDGET = 500
local meta, active = KEYS[1], KEYS[2]
local base, force, budget = ARGV[1], ARGV[2] == '1', tonumber(ARGV[3])
local finish = ARGV[4] == '1'

-- checks, in order: arguments, paused, active (unless forced)
if not budget or budget < 1 or budget > MAX_BUDGET or #KEYS - 10 > budget then
  return redis.error_reply('EMQARG obliterate budget must be 1..' .. MAX_BUDGET)
end
if redis.call('HEXISTS', meta, 'paused') == 0 then
  return redis.error_reply('EMQSTATE not paused: pause the queue first')
end
if not force and redis.call('ZCARD', active) > 0 then
  return redis.error_reply('EMQSTATE active jobs present: wait, or force')
end

local deleted = 0
-- the leftovers the caller found (rows without a set, other verbs' keys): one unit each
for i = 11, #KEYS do
  redis.call('DEL', KEYS[i])
  deleted = deleted + 1
end
budget = budget - deleted

-- the state sets, active first, each job a unit of the budget
for i = 2, 6 do
  local set = KEYS[i]
  if redis.call('ZCARD', set) > 0 then
    if budget <= 0 then return {1, deleted} end
    local ids = redis.call('ZRANGE', set, 0, budget - 1)
    local doomed = {}  -- one DEL per 100 jobs
    for n, id in ipairs(ids) do
      local jk = base .. 'job:' .. id
      doomed[#doomed + 1] = jk
      doomed[#doomed + 1] = jk .. ':logs'
      doomed[#doomed + 1] = jk .. ':lock'
      if n % 100 == 0 or n == #ids then
        redis.call('DEL', unpack(doomed))
        doomed = {}
      end
    end
    redis.call('ZREMRANGEBYRANK', set, 0, #ids - 1)
    budget = budget - #ids
    deleted = deleted + #ids
    if redis.call('ZCARD', set) > 0 then return {1, deleted} end
  end
end
if not finish then return {2, deleted} end
redis.call('DEL', KEYS[7], KEYS[8], KEYS[9], KEYS[10], meta)
return {0, deleted}
