--[[
  Hand held jobs back to pending at once (graceful shutdown): fenced, no count.
  KEYS  1 active   ZSET  claimed ids
        2 pending  ZSET  ready ids
        3 wake     LIST  wake tokens
  ARGV  1 queue base   then pairs: id, token (at most MAX_HELD pairs)
  Returns  one code per pair: 1 released | -1 no row | -2 stale token | -3 not active
  Errors   EMQARG   more than MAX_HELD pairs (nothing written; the verb refuses them first)
  Events   released (per job)
  Moves    active -> pending (first in its priority band)
  Bound    O(pairs * log N); at most MAX_HELD pairs per call (include/caps.lua)
  Every pair is checked (extend_lock's order) before the first write; the token is not
  changed, so a released job's next claim is token + 1 and nothing counts a failure.
  A grouped job gives back its group's active slot and goes back to the front of its lane
  (`leave_active`, `ready`; docs/lanes.md).
]]
-- @include caps
-- @include score
-- @include lanes
-- @include ready
-- @include leave_active
local active, pending, wake, base = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
if (#ARGV - 1) / 2 > MAX_HELD then
  return redis.error_reply('EMQARG release takes at most ' .. MAX_HELD .. ' pairs')
end
local codes, ok = {}, {}
for i = 2, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  local f = redis.call('HMGET', base .. 'job:' .. id, 'token', 'priority', 'group')
  local code = 1
  if not f[1] then code = -1
  elseif f[1] ~= token then code = -2
  elseif not redis.call('ZSCORE', active, id) then code = -3
  else
    ok[#ok + 1] = {id, tonumber(f[2] or '0'), f[3]}
    if f[3] then lanes_touch(base, f[3]) end
  end
  codes[#codes + 1] = code
end
for _, job in ipairs(ok) do
  local id = job[1]
  leave_active(base, active, id, job[3])
  redis.call('HSET', base .. 'job:' .. id, 'state', 'pending')
  ready(base, pending, id, job[3], band_score(job[2], 0))
  redis.call('PUBLISH', base .. 'events', '{"event":"released","job":"' .. id .. '"}')
end
return codes
