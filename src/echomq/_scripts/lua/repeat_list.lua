--[[
  A page of the registry in order of next slot (paused records last), with the records;
  a read only.
  KEYS  1 repeat  ZSET  the registry: key -> next slot ms (+inf while paused)
  ARGV  1 queue base (emq:{q}:)   2 offset (rank, >= 0)   3 limit (1..MAX_REPEAT_PAGE records)
  Returns  {server now ms, registered count, paused count, then per record: key, its
           fields (flat HGETALL; empty when the record is missing)}
  Errors   EMQARG  the limit is not 1..MAX_REPEAT_PAGE
  Events   (none)
  Moves    (none)
  Bound    O(limit + log R); at most MAX_REPEAT_PAGE records per call
           (include/caps.lua)
]]
-- @include caps
-- @include time
local registry = KEYS[1]
local base, offset, limit = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if not limit or limit < 1 or limit > MAX_REPEAT_PAGE or not offset or offset < 0 then
  return redis.error_reply('EMQARG repeat_list limit must be 1..' .. MAX_REPEAT_PAGE)
end
local out = {now_ms(), redis.call('ZCARD', registry),
  redis.call('ZCOUNT', registry, '+inf', '+inf')}
for _, key in ipairs(redis.call('ZRANGE', registry, offset, offset + limit - 1)) do
  out[#out + 1] = key
  out[#out + 1] = redis.call('HGETALL', base .. 'repeat:' .. key)
end
return out
