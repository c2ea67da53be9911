-- push_wake(wake, n): wake idle consumers (they BLPOP the list); the list never holds
-- more than WAKE_CAP tokens, however much work arrives. wake_once(wake): push_wake(wake, 1)
-- at most once per script call (the ready / leave_active helpers use it).
local WAKE_CAP = 64
local function push_wake(wake, n)
  if redis.call('LLEN', wake) < WAKE_CAP then redis.call('RPUSH', wake, n) end
end
local woken = false
local function wake_once(wake)
  if not woken then
    push_wake(wake, 1)
    woken = true
  end
end
