-- ready(base, pending, id, group, score): place a job that may run now in its ready
-- structure: the flat `pending` set, or its group's lane (the group joins the ring when it
-- may start a job, docs/lanes.md), and wake one idle consumer (one token per script call)
-- when the job is claimable. `group` is the row's `group` field (false/nil: ungrouped);
-- `score` its pending score (band_score). Answers true when the job is claimable now.
-- Call lanes_touch(base, group) in the script's read phase.
-- ready_batch(base, pending, flat, grouped) does the same for many: `flat` the ungrouped
-- jobs as ZADD arguments (score, id, ...; one variadic ZADD per 256), `grouped`
-- {id, group, score} triples (false: none).
-- leave_ready(base, pending, id, group): take a waiting job out of its ready structure
-- (removed, cancelled); answers 1 when it was there.
-- @include wake
-- @include lanes
local function ready(base, pending, id, group, score)
  local claimable = true
  if not group then
    redis.call('ZADD', pending, score, id)
  else
    if redis.call('ZADD', lane_key(base, group), score, id) == 1 then
      redis.call('ZADD', base .. 'groups', 0, group)
      redis.call('HINCRBY', base .. 'meta', 'lane_jobs', 1)
    end
    claimable = lane_join(base, group)
  end
  if claimable then wake_once(base .. 'wake') end
  return claimable
end

local function ready_batch(base, pending, flat, grouped)
  for first = 1, #flat, 512 do  -- one variadic ZADD per 256 ungrouped jobs
    redis.call('ZADD', pending, unpack(flat, first, math.min(first + 511, #flat)))
  end
  if #flat > 0 then wake_once(base .. 'wake') end
  if grouped then
    for _, job in ipairs(grouped) do ready(base, pending, job[1], job[2], job[3]) end
  end
end

local function leave_ready(base, pending, id, group)
  if not group then return redis.call('ZREM', pending, id) end
  if redis.call('ZREM', lane_key(base, group), id) == 0 then return 0 end
  redis.call('HINCRBY', base .. 'meta', 'lane_jobs', -1)
  lane_forget(base, group)
  return 1
end
