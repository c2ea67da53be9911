--[[
  The scheduler's read: the repeatables due now (server clock), with their records; a read
  only.
  KEYS  1 repeat  ZSET  the registry: key -> next slot ms (+inf while paused)
        2 meta    HASH  the queue's meta (`paused`: nothing is due on a paused queue)
  ARGV  1 queue base (emq:{q}:)   2 limit (1..MAX_REPEAT_PAGE records)
  Returns  {server now ms, queue paused (0|1), the earliest slot after now (ms, -1: none),
           then per due record: key, its fields (flat HGETALL)}
  Errors   EMQARG  the limit is not 1..MAX_REPEAT_PAGE
  Events   (none)
  Moves    (none)
  Bound    O(limit + log R); at most MAX_REPEAT_PAGE records per call
           (include/caps.lua)
]]
-- @include caps
-- @include time
local registry, meta = KEYS[1], KEYS[2]
local base, limit = ARGV[1], tonumber(ARGV[2])
if not limit or limit < 1 or limit > MAX_REPEAT_PAGE then
  return redis.error_reply('EMQARG repeat_due limit must be 1..' .. MAX_REPEAT_PAGE)
end
local now = now_ms()
if redis.call('HEXISTS', meta, 'paused') == 1 then return {now, 1, -1} end
local out = {now, 0, -1}
local later = redis.call('ZRANGEBYSCORE', registry, '(' .. now, 9007199254740991,
  'WITHSCORES', 'LIMIT', 0, 1)
if later[2] then out[3] = tonumber(later[2]) end
local due = redis.call('ZRANGEBYSCORE', registry, '-inf', now, 'LIMIT', 0, limit)
for _, key in ipairs(due) do
  out[#out + 1] = key
  out[#out + 1] = redis.call('HGETALL', base .. 'repeat:' .. key)
end
return out
