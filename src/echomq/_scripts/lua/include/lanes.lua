-- Group lanes (docs/lanes.md). A grouped job waits in its group's lane, `g:<group>:pending`
-- (a zset scored like pending); `gstate` (a hash shared by every group: `<group>` -> its
-- jobs held now, absent at 0 (seed 000's `gactive`); `<group>:limit` -> its own
-- concurrency limit; `<group>:rate` -> `<max>:<ms>` its own rate; `:turn` -> the ring's
-- last turn, the score of its back (no group is named '')) is read and written once per
-- claim however many groups it serves; `g:<group>:rate` counts a group's starts in its
-- rate window (it expires with the window); `gring` (a zset, score = turn) holds the
-- groups that have ready work and may start a job now (the claim serves it round robin);
-- `glimited` (group -> ms its window reopens) the groups waiting for their window;
-- `groups` (score 0) every group with waiting or active jobs; meta's `lane_jobs` counts
-- the jobs waiting in lanes. Every key is derived from the queue base.
local function lane_key(base, group)
  return base .. 'g:' .. group .. ':pending'
end

-- lanes_touch(base, group): the read-phase touch of every key the lane helpers may write
-- for `group`, so that a script stops before its first write when one is elsewhere (a
-- reshard: docs/lua.md, rule 1). Call it for each group a script will place or release.
local function lanes_touch(base, group)
  redis.call('EXISTS', lane_key(base, group), base .. 'g:' .. group .. ':rate',
    base .. 'gring', base .. 'glimited', base .. 'groups', base .. 'gstate',
    base .. 'meta', base .. 'wake')
end

-- group_slots(base, group): the group's active count and its concurrency limit (its own,
-- else the queue's default, meta's `group_concurrency`; nil = no limit).
local function group_slots(base, group)
  local own = redis.call('HMGET', base .. 'gstate', group, group .. ':limit')
  local limit = own[2] or redis.call('HGET', base .. 'meta', 'group_concurrency')
  return tonumber(own[1] or '0'), tonumber(limit)
end

-- lane_join(base, group): put the group at the back of the ring when it may start a job
-- now (its lane holds work, it is under its limit, it is not waiting for its rate window).
-- Answers true when the group is in the ring.
local function lane_join(base, group)
  local ring = base .. 'gring'
  if redis.call('ZSCORE', ring, group) then return true end
  if redis.call('ZSCORE', base .. 'glimited', group) then return false end
  if redis.call('EXISTS', lane_key(base, group)) == 0 then return false end
  local state = base .. 'gstate'
  local own = redis.call('HMGET', state, group, group .. ':limit', ':turn')
  local limit = tonumber(own[2] or redis.call('HGET', base .. 'meta', 'group_concurrency'))
  if limit and tonumber(own[1] or '0') >= limit then return false end
  local turn = tonumber(own[3])
  if not turn then  -- a ring from before the `:turn` field: its back's score
    turn = tonumber(redis.call('ZRANGE', ring, -1, -1, 'WITHSCORES')[2]) or 0
  end
  redis.call('ZADD', ring, turn + 1, group)
  redis.call('HSET', state, ':turn', turn + 1)
  return true
end

-- lane_forget(base, group): a group with no waiting and no active job leaves the ring and
-- the registry (its settings stay in `gstate`).
local function lane_forget(base, group)
  if redis.call('EXISTS', lane_key(base, group)) == 1 then return end
  redis.call('ZREM', base .. 'gring', group)
  if not redis.call('HGET', base .. 'gstate', group) then
    redis.call('ZREM', base .. 'groups', group)
  end
end
