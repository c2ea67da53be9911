--[[
  One page of re-placing the groups after a change of the groups' default limits: a group
  at (or over) its limit leaves the ring; one that may start a job joins it.
  KEYS  1 groups  ZSET  the groups with waiting or active jobs (score 0, by name)
  ARGV  1 queue base (emq:{q}:)   2 cursor: the last group looked at ('' = the first)
        3 budget: groups per call (1..MAX_BUDGET)
  Returns  {groups looked at, the next cursor ('' = done)}
  Errors   EMQARG   the budget is not 1..MAX_BUDGET (nothing written; the verb refuses it first)
  Events   (none)
  Moves    (none)
  Bound    O(budget * log N); at most MAX_BUDGET groups per call (include/caps.lua)
  A group waiting for its rate window stays there (the claim looks at it when it reopens).
]]
-- @include caps
-- @include wake
-- @include lanes
local registry = KEYS[1]
local base, cursor, budget = ARGV[1], ARGV[2], tonumber(ARGV[3])
if not budget or budget < 1 or budget > MAX_BUDGET then
  return redis.error_reply('EMQARG lanes_rejoin budget must be 1..' .. MAX_BUDGET)
end
local from = cursor == '' and '-' or '(' .. cursor
local names = redis.call('ZRANGEBYLEX', registry, from, '+', 'LIMIT', 0, budget)
for _, name in ipairs(names) do lanes_touch(base, name) end

for _, name in ipairs(names) do
  local active, limit = group_slots(base, name)
  if limit and active >= limit then
    redis.call('ZREM', base .. 'gring', name)
  elseif lane_join(base, name) then
    wake_once(base .. 'wake')
  end
end
local next_cursor = #names < budget and '' or names[#names]
return {#names, next_cursor}
