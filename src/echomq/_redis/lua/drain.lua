--[[
  One bounded step of a drain: delete up to `budget` waiting jobs - pending first, then
  (when asked) scheduled - each with its row, logs and lock. Active jobs and every other
  key (the repeat registry included) are untouched. The verb loops until none remain.
  KEYS  1 pending    ZSET  ready ids
        2 schedule   ZSET  delayed ids
  ARGV  1 queue base (emq:{q}:)   2 '1' = drain the schedule set too   3 budget (1..500)
  Returns  {deleted, remaining}: the jobs deleted by this call, and the jobs still waiting
           in the drained sets (0: the drain is done)
  Errors   EMQARG   the budget is not 1..500 (nothing written; the verb refuses it first)
  Events   drained {"event":"drained","job":"","count":n,"remaining":r} when n > 0
  Moves    pending | scheduled -> (none)
  Bound    O(budget * log N); at most 500 jobs per call (validate.MAX_BUDGET)
  The ids are taken from the head of each set and removed by rank (ZREMRANGEBYRANK); the
  rows, logs and locks go in one DEL per 100 jobs (so no unpack is longer than 300 keys).
]]
local MAX_BUDGET = 500
local pending, schedule = KEYS[1], KEYS[2]
local base, with_schedule, budget = ARGV[1], ARGV[2] == '1', tonumber(ARGV[3])
if not budget or budget < 1 or budget > MAX_BUDGET then
  return redis.error_reply('EMQARG drain budget must be 1..' .. MAX_BUDGET)
end

local function wipe(set, limit)
  local ids = redis.call('ZRANGE', set, 0, limit - 1)
  local doomed = {}  -- one DEL per 100 jobs: far fewer calls than one per job
  for i, id in ipairs(ids) do
    local jk = base .. 'job:' .. id
    doomed[#doomed + 1] = jk
    doomed[#doomed + 1] = jk .. ':logs'
    doomed[#doomed + 1] = jk .. ':lock'
    if i % 100 == 0 or i == #ids then
      redis.call('DEL', unpack(doomed))
      doomed = {}
    end
  end
  if #ids > 0 then redis.call('ZREMRANGEBYRANK', set, 0, #ids - 1) end
  return #ids
end

local n = wipe(pending, budget)
if with_schedule and n < budget then n = n + wipe(schedule, budget - n) end
local remaining = redis.call('ZCARD', pending)
if with_schedule then remaining = remaining + redis.call('ZCARD', schedule) end
if n > 0 then
  redis.call('PUBLISH', base .. 'events',
    cjson.encode({event = 'drained', job = '', count = n, remaining = remaining}))
end
return {n, remaining}
