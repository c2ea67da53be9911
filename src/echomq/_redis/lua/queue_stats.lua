--[[
  Read a queue's counts in one atomic look; a read only.
  KEYS  1 meta  2 pending  3 schedule  4 active  5 dead  6 completed
        7 metrics:completed  8 metrics:failed
  ARGV  1 window ms (completions counted in the last window)
  Returns  {pending, scheduled, active, dead, completed, paused (0|1),
            completed total, failed total, completed in the window, server now ms}
  Events   (none)
  Moves    (none)
  Bound    O(log N): ZCARDs, one ZCOUNT, two HGETs
]]
-- @include time
local now = now_ms()
local window = tonumber(ARGV[1])
return {
  redis.call('ZCARD', KEYS[2]),
  redis.call('ZCARD', KEYS[3]),
  redis.call('ZCARD', KEYS[4]),
  redis.call('ZCARD', KEYS[5]),
  redis.call('ZCARD', KEYS[6]),
  redis.call('HEXISTS', KEYS[1], 'paused'),
  tonumber(redis.call('HGET', KEYS[7], 'count') or '0'),
  tonumber(redis.call('HGET', KEYS[8], 'count') or '0'),
  redis.call('ZCOUNT', KEYS[6], now - window, '+inf'),
  now,
}
