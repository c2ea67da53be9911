-- now_ms(): the server's clock in milliseconds (TIME). Every score and timestamp of a
-- queue is on this one clock; a client never sends a time.
local function now_ms()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end
