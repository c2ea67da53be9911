--[[
  Crash recovery: every expired lease goes back to pending, with no count.
  KEYS  1 active   ZSET  claimed ids; score = lease deadline ms
        2 pending  ZSET  ready ids
        3 wake     LIST  wake tokens
  ARGV  1 queue base   2 limit
  Returns  the ids returned to pending (an id with no row leaves active, listed nowhere)
  Errors   (none)
  Events   recovered (per job)
  Moves    active -> pending (first in its priority band)
]]
local active, pending, wake = KEYS[1], KEYS[2], KEYS[3]
local base = ARGV[1]
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local expired = redis.call('ZRANGEBYSCORE', active, '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
if #expired == 0 then return {} end
-- reads first
local priorities = {}
for i, id in ipairs(expired) do
  priorities[i] = redis.call('HGET', base .. 'job:' .. id, 'priority')
end
local recovered = {}
redis.call('ZREM', active, unpack(expired))
for i, id in ipairs(expired) do
  if priorities[i] then
    redis.call('ZADD', pending, -tonumber(priorities[i]) * 1099511627776, id)
    redis.call('HSET', base .. 'job:' .. id, 'state', 'pending')
    redis.call('PUBLISH', base .. 'events', '{"event":"recovered","job":"' .. id .. '"}')
    recovered[#recovered + 1] = id
  end
end
if #recovered > 0 and redis.call('LLEN', wake) < 64 then redis.call('RPUSH', wake, #recovered) end
return recovered
