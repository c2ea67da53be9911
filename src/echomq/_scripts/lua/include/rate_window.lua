-- Rate windows (docs/lanes.md): a queue's (`rate`, meta's `rate_max` per `rate_ms`) or a
-- group's (`g:<group>:rate`) count of starts in a fixed window of `period` ms, aligned on
-- the server clock: a window opens with its first start and ends on a multiple of its
-- period. A window is {key, used, max, ms until it reopens, whether it needs its expiry}.
-- window_left(now, period): the ms until the window holding `now` ends.
-- rate_window(key, max, period, now): the window's state, read (GET, and PTTL when used).
-- count_starts(win, n, now): n more starts in the window. A fresh window's key is set to
-- expire at its last ms (Redis expires a key once its clock is past the expiry), so from
-- the window's end on it reads as gone: a claim in the very ms a window ends (when a
-- waiting consumer wakes) sees the next one empty, never the old count (a group would sit
-- out a whole extra window).
-- @include score
local function window_left(now, period)
  return (math.floor(now / period) + 1) * period - now
end
local function rate_window(key, max, period, now)
  local used = tonumber(redis.call('GET', key) or '0')
  local ttl = used > 0 and redis.call('PTTL', key) or -1
  local fresh = ttl < 0
  if fresh then ttl = window_left(now, period) end
  return {key, used, max, ttl, fresh}
end
local function count_starts(win, n, now)
  if win[5] then
    redis.call('SET', win[1], n, 'PXAT', int_arg(now + win[4] - 1))
  else
    redis.call('INCRBY', win[1], n)
  end
end
