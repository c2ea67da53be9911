--[[
  Complete a held job: fenced by its token, idempotent for the same token.
  KEYS  1 row        HASH  the job
        2 active     ZSET  claimed ids
        3 completed  ZSET  finished ids; score = finish time ms
        4 metrics    HASH  emq:{q}:metrics:completed; field count
  ARGV  1 id   2 token   3 result   4 queue base   5 keep_count (-1 = keep all)
        6 keep_age_ms (0 = no age limit)
  Returns  1 completed | 2 already completed with this token (nothing changed)
           -1 no row | -2 stale token | -3 not in active
  Events   completed
  Moves    active -> completed; completed -> (none) (the retention trim, other rows)
  Bound    O(log N) for the job, plus the retention trim: at most 100 + 100 completed rows
           (and their logs) deleted per call
  Retention: deletes at most 100 of the oldest completed rows (and their logs) that are
  older than keep_age_ms, and at most 100 beyond keep_count (the job completed now counts,
  so keep_count 0 trims it at once); a row is deleted only while its state is 'completed',
  so a trimmed id can never take a live row with it. The rows and logs it will delete are
  read before the first write (docs/lua.md, rule 1).
]]
local row, active, completed, metrics = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id, token, result, base = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local keep_count, keep_age = tonumber(ARGV[5]), tonumber(ARGV[6])
local MAX_TRIM = 100
-- @include time

-- checks, in order: row, token, (idempotent repeat), membership
local fields = redis.call('HMGET', row, 'attempts', 'state')
if not fields[1] then return -1 end
if fields[1] ~= token then return -2 end
if fields[2] == 'completed' then return 2 end
if not redis.call('ZSCORE', active, id) then return -3 end

local now = now_ms()

-- the retention's reads: the oldest rows to trim (by age, then by count), their state
-- and their logs, before any write
local aged = {}
if keep_age > 0 then
  aged = redis.call('ZRANGEBYSCORE', completed, '-inf', now - keep_age, 'LIMIT', 0, MAX_TRIM)
end
local over, self_trim = {}, false
if keep_count >= 0 then
  local card = redis.call('ZCARD', completed)
  if not redis.call('ZSCORE', completed, id) then card = card + 1 end
  local excess = card - #aged - keep_count
  if excess > 0 then
    local n = math.min(excess, MAX_TRIM)
    over = redis.call('ZRANGE', completed, #aged, #aged + n - 1)
    self_trim = #over < n  -- the job completed now is among the oldest to go
  end
end
local trimmed, doomed = {}, {}
for _, list in ipairs({aged, over}) do
  for _, old in ipairs(list) do
    if old ~= id then
      local jk = base .. 'job:' .. old
      trimmed[#trimmed + 1] = old
      if redis.call('HGET', jk, 'state') == 'completed' then doomed[#doomed + 1] = jk end
      redis.call('EXISTS', jk .. ':logs')  -- read: a moved key fails here, before any write
    end
  end
end
local own_logs = base .. 'job:' .. id .. ':logs'
if self_trim then redis.call('EXISTS', own_logs) end

redis.call('ZREM', active, id)
redis.call('HSET', row, 'state', 'completed', 'result', result, 'finished_at', now)
redis.call('ZADD', completed, now, id)
redis.call('HINCRBY', metrics, 'count', 1)
redis.call('PUBLISH', base .. 'events', '{"event":"completed","job":"' .. id .. '"}')

-- retention: a bounded number of the oldest rows per call
for _, jk in ipairs(doomed) do redis.call('DEL', jk, jk .. ':logs') end
if #trimmed > 0 then redis.call('ZREM', completed, unpack(trimmed)) end
if self_trim then
  redis.call('DEL', row, own_logs)
  redis.call('ZREM', completed, id)
end
return 1
