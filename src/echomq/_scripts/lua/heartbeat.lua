--[[
  A worker's heartbeat: rewrite its record (a hash with a TTL) and its entry in the
  queue's worker list, on the server clock (docs/runtime.md, "Workers").
  KEYS  1 workers  ZSET  worker ids; score = last beat ms (server clock)
        2 record   HASH  this worker's record (emq:{q}:worker:<id>)
  ARGV  1 worker id   2 ttl ms (0: the worker stopped: its record and its entry go)
        3 up ms (how long the worker has run)   4 blocked ms (how long its event loop has
        not run; -1: it runs)   then field, value pairs (at most MAX_BEAT_FIELDS)
  Returns  the server's now, ms
  Errors   EMQARG   more than MAX_BEAT_FIELDS pairs, or an odd count (nothing written)
  Events   (none)
  Moves    (none)
  Bound    O(pairs + log W), at most MAX_BEAT_FIELDS pairs (include/caps.lua)
  The record is replaced whole (fields of a previous beat, such as blocked_since, do not
  linger); the script adds last_beat = now, started_at = now - up, and blocked_since =
  now - blocked when the loop is blocked.
]]
local workers, record = KEYS[1], KEYS[2]
local id = ARGV[1]
local ttl, up, blocked = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
-- @include caps
-- @include time
if #ARGV % 2 ~= 0 or (#ARGV - 4) / 2 > MAX_BEAT_FIELDS then
  return redis.error_reply('EMQARG heartbeat takes at most ' .. MAX_BEAT_FIELDS .. ' field pairs')
end
local now = now_ms()
redis.call('DEL', record)
if ttl <= 0 then
  redis.call('ZREM', workers, id)
  return now
end
local fields = {'last_beat', now, 'started_at', now - up}
if blocked >= 0 then
  fields[#fields + 1] = 'blocked_since'
  fields[#fields + 1] = now - blocked
end
for i = 5, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', record, unpack(fields))
redis.call('PEXPIRE', record, ttl)
redis.call('ZADD', workers, now, id)
return now
