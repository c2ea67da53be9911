-- server_run_id(): the run_id of this server process (INFO server): a lease stamped with
-- another one is from before a restart (or another node), recovered without counting.
-- (A plain find, then the word there: cheaper than a pattern scan of the whole section.)
local function server_run_id()
  local info = redis.call('INFO', 'server')
  local at = string.find(info, 'run_id:', 1, true)
  return at and string.match(info, '^%w+', at + 7)
end
