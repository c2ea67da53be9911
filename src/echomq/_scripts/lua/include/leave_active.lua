-- leave_active(base, active, id, group): the job leaves the active set; a grouped job
-- (`group` = the row's `group` field) gives back its group's active slot, and the group
-- rejoins the ring (with a wake token) when it may start a job again, or leaves the
-- registry when nothing of it waits or runs (docs/lanes.md). Call lanes_touch(base, group)
-- in the script's read phase.
-- @include wake
-- @include lanes
local function leave_active(base, active, id, group)
  redis.call('ZREM', active, id)
  if not group then return end
  local held = base .. 'gstate'
  if redis.call('HINCRBY', held, group, -1) <= 0 then redis.call('HDEL', held, group) end
  if lane_join(base, group) then
    wake_once(base .. 'wake')
  else
    lane_forget(base, group)
  end
end
