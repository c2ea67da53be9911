-- push_wake(wake, n): wake idle consumers (they BLPOP the list); the list never holds
-- more than WAKE_CAP tokens, however much work arrives.
local WAKE_CAP = 64
local function push_wake(wake, n)
  if redis.call('LLEN', wake) < WAKE_CAP then redis.call('RPUSH', wake, n) end
end
