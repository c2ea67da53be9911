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
  rows, logs and locks are read (one EXISTS per 100 jobs) before the first write, then go
  in one DEL per 100 jobs (so no unpack is longer than 300 keys).
]]
local MAX_BUDGET = 500
local pending, schedule = KEYS[1], KEYS[2]
local base, with_schedule, budget = ARGV[1], ARGV[2] == '1', tonumber(ARGV[3])
if not budget or budget < 1 or budget > MAX_BUDGET then
  return redis.error_reply('EMQARG drain budget must be 1..' .. MAX_BUDGET)
end

-- reads first (docs/lua.md, rule 1): the ids to delete, and every row, log list and lock
-- of theirs (a key another node holds mid-reshard fails the call here, having written
-- nothing)
local ids = redis.call('ZRANGE', pending, 0, budget - 1)
local scheduled = {}
if with_schedule and #ids < budget then
  scheduled = redis.call('ZRANGE', schedule, 0, budget - #ids - 1)
end
local doomed = {}  -- the per-job keys, in groups of 100 jobs (one EXISTS and one DEL each)
for _, list in ipairs({ids, scheduled}) do
  for i, id in ipairs(list) do
    local jk = base .. 'job:' .. id
    local group = doomed[#doomed]
    if i % 100 == 1 or not group then
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
if #scheduled > 0 then redis.call('ZREMRANGEBYRANK', schedule, 0, #scheduled - 1) end
local n = #ids + #scheduled
local remaining = redis.call('ZCARD', pending)
if with_schedule then remaining = remaining + redis.call('ZCARD', schedule) end
if n > 0 then
  redis.call('PUBLISH', base .. 'events',
    cjson.encode({event = 'drained', job = '', count = n, remaining = remaining}))
end
return {n, remaining}
