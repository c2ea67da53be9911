--[[
  Everything that says why a job is (not) running, in one atomic read; a read only.
  KEYS  1 row  2 pending  3 schedule  4 active  5 dead  6 completed  7 meta  8 lock
  ARGV  1 id
  Returns  -1 no row | {row (flat HGETALL), pending rank | nil, pending count,
           schedule score | nil, active score | nil, dead score | nil, completed score | nil,
           paused (0|1), server run_id, server now ms, lock key exists (0|1)}
  Events   (none)
  Moves    (none)
  Bound    O(log N): one ZRANK, five ZSCOREs, the row (a fixed set of fields)
]]
local id = ARGV[1]
-- @include time
-- @include run_id
local row = redis.call('HGETALL', KEYS[1])
if #row == 0 then return -1 end
local now = now_ms()
return {
  row,
  redis.call('ZRANK', KEYS[2], id),
  redis.call('ZCARD', KEYS[2]),
  redis.call('ZSCORE', KEYS[3], id),
  redis.call('ZSCORE', KEYS[4], id),
  redis.call('ZSCORE', KEYS[5], id),
  redis.call('ZSCORE', KEYS[6], id),
  redis.call('HEXISTS', KEYS[7], 'paused'),
  server_run_id(),
  now,
  redis.call('EXISTS', KEYS[8]),
}
