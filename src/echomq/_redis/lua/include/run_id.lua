-- server_run_id(): the run_id of this server process (INFO server): a lease stamped with
-- another one is from before a restart (or another node), recovered without counting.
local function server_run_id()
  return string.match(redis.call('INFO', 'server'), 'run_id:(%w+)')
end
