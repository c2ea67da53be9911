-- to_schedule(base, active, schedule, row, id, group, until_ms, ms): a held job leaves
-- active (a grouped job gives back its group's slot: leave_active) and waits in the
-- schedule until `until_ms` with nothing counted (a durable sleep, a back-off); the
-- workers' channel hears when it is due, as for a retry with a delay. Call
-- lanes_touch(base, group) in the script's read phase.
-- @include leave_active
local function to_schedule(base, active, schedule, row, id, group, until_ms, ms)
  leave_active(base, active, id, group)
  redis.call('HSET', row, 'state', 'scheduled', 'run_at', until_ms)
  redis.call('ZADD', schedule, until_ms, id)
  redis.call('PUBLISH', base .. 'control',
    '{"event":"scheduled","job":"' .. id .. '","delay_ms":' .. ms .. '}')
end
