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
-- Sliding windows (a limit set with kind `sliding`: meta `rate_kind`, `group_rate_kind`,
-- or a group's own `<max>:<ms>:sliding`): a zset of the starts (`slide`,
-- `g:<group>:slide`; score = the start's server ms, member `<ms>:<n>`, n the window's count
-- after it: unique, since every start of one ms sees the earlier ones) holding the starts
-- of the last `period` ms; a claim may start a job while fewer than `max` are in it, so
-- no `period`-long stretch of time, wherever it begins, holds more than `max` starts.
-- slide_window(key, max, period, now): the window's state (ZCOUNT, and one ZRANGEBYSCORE
-- when it holds starts: the ms until the start whose leaving makes room; and ZCARD: the
-- starts that left it are the lowest ranks); its sixth field is the period (a sliding
-- window's mark), its seventh those left starts. count_starts trims them (by rank: the
-- worker's ACL rule has no ZREMRANGEBYSCORE), adds the starts and sets the key to expire
-- a period after them.
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
local function slide_window(key, max, period, now)
  local from = '(' .. int_arg(now - period)
  local used = redis.call('ZCOUNT', key, from, '+inf')
  local old = redis.call('ZCARD', key) - used  -- starts that left the window (the lowest)
  local left = period
  if used > 0 then
    local first = redis.call('ZRANGEBYSCORE', key, from, '+inf', 'WITHSCORES', 'LIMIT',
      math.max(0, used - max), 1)
    if first[2] then left = math.max(1, tonumber(first[2]) + period - now) end
  end
  return {key, used, max, left, false, period, old}
end
local function count_starts(win, n, now)
  local period = win[6]
  if period then
    local at = int_arg(now)
    if win[7] > 0 then redis.call('ZREMRANGEBYRANK', win[1], 0, win[7] - 1) end
    local add = {}
    for i = 1, n do
      add[2 * i - 1], add[2 * i] = at, at .. ':' .. (win[2] + i)
    end
    redis.call('ZADD', win[1], unpack(add))
    redis.call('PEXPIRE', win[1], period)
  elseif win[5] then
    redis.call('SET', win[1], n, 'PXAT', int_arg(now + win[4] - 1))
  else
    redis.call('INCRBY', win[1], n)
  end
end
