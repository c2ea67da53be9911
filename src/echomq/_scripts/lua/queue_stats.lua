--[[
  Read a queue's counts and its throughput by the minute in one atomic look; a read only.
  KEYS  1 meta  2 pending  3 schedule  4 active  5 dead  6 completed
        7 repeat  ZSET  the repeat registry (+inf: a paused record)
        8 groups  ZSET  the lanes' registry
        9 waiting ZSET  flow parents with open children
        10 cancelled ZSET  cancelled rows kept
  ARGV  1 queue base   2 minutes (1..MAX_MINUTES): how many minutes of counters, the current one
        included
  Returns  {pending, scheduled, active, dead, completed, paused (0|1),
            completed total, dead total, cancelled total, server now ms,
            {capped completed rows, capped dead rows, capped completions entries,
            capped cancelled rows},
            {completed per minute}, {dead per minute}, {cancelled per minute},
            repeatables registered, repeatables paused, jobs waiting in group lanes,
            groups with waiting or active jobs, waiting (flow parents with open children),
            cancelled, expired total}
           (the per-minute lists oldest first; the last is the current, partial minute)
  Errors   EMQARG   minutes is not 1..MAX_MINUTES
  Events   (none)
  Moves    (none)
  Bound    O(minutes): ZCARDs, 3 ZCOUNTs, 2 HGETs, 3 HGETs per minute, at most MAX_MINUTES minutes per
           call (include/caps.lua)
  dead counts the expired rows kept too (their index is `dead`; their total is
  metrics:expired). dead and completed count only the jobs whose retention has not
  ended: the members of each index scored now or later (a member's score is when its row's TTL ends), so a
  member whose row Redis has already deleted, and that the retention sweep
  (retention_sweep.lua) has not reached yet, is not counted.
  The per-minute counters are `metrics:<outcome>:<minute>` (minute = server ms / 60000),
  written by include/finished.lua with a TTL of MAX_MINUTES (and 2 minutes): what is older reads as 0.
]]
-- @include caps
-- @include time
local base = ARGV[1]
local minutes = tonumber(ARGV[2])
if not minutes or minutes < 1 or minutes > MAX_MINUTES then
  return redis.error_reply('EMQARG stats minutes must be 1..' .. MAX_MINUTES)
end
local now = now_ms()
local current = math.floor(now / 60000)
local function total(name)
  return tonumber(redis.call('HGET', base .. 'metrics:' .. name, 'count') or '0')
end
local capped = redis.call('HMGET', base .. 'metrics:capped', 'completed', 'dead', 'completions',
  'cancelled')
local series = {}
for k, outcome in ipairs({'completed', 'dead', 'cancelled'}) do
  local counts = {}
  for m = current - minutes + 1, current do
    counts[#counts + 1] = tonumber(redis.call('HGET', base .. 'metrics:' .. outcome .. ':' .. m,
      'count') or '0')
  end
  series[k] = counts
end
return {
  redis.call('ZCARD', KEYS[2]),
  redis.call('ZCARD', KEYS[3]),
  redis.call('ZCARD', KEYS[4]),
  redis.call('ZCOUNT', KEYS[5], now, '+inf'),
  redis.call('ZCOUNT', KEYS[6], now, '+inf'),
  redis.call('HEXISTS', KEYS[1], 'paused'),
  total('completed'),
  total('dead'),
  total('cancelled'),
  now,
  {tonumber(capped[1] or '0'), tonumber(capped[2] or '0'), tonumber(capped[3] or '0'),
    tonumber(capped[4] or '0')},
  series[1],
  series[2],
  series[3],
  redis.call('ZCARD', KEYS[7]),
  redis.call('ZCOUNT', KEYS[7], '+inf', '+inf'),
  tonumber(redis.call('HGET', KEYS[1], 'lane_jobs') or '0'),
  redis.call('ZCARD', KEYS[8]),
  redis.call('ZCARD', KEYS[9]),
  redis.call('ZCARD', KEYS[10]),
  total('expired'),
}
