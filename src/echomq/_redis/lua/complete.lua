--[[
  Complete a held job: fenced by its token, idempotent for the same token.
  KEYS  1 row        HASH  the job
        2 active     ZSET  claimed ids
        3 completed  ZSET  finished ids; score = finish time ms
        4 metrics    HASH  emq:{q}:metrics:completed; field count
  ARGV  1 id   2 token   3 result   4 queue base   5 keep_count (-1 = keep all)
        6 keep_age_ms (0 = no age limit)
  Returns  1 completed | 2 already completed with this token (nothing changed)
           -1 no row | -3 not in active
  Errors   EMQSTALE   the token is not the row's attempts
  Events   completed
  Moves    active -> completed; completed -> (none) (the retention trim, other rows)
  Bound    O(log N) for the job, plus the retention trim: at most 100 + 100 completed rows
           (and their logs) deleted per call
  Retention: then deletes at most 100 of the oldest completed rows (and their logs) that
  are older than keep_age_ms or beyond keep_count; a row is deleted only while its state
  is still 'completed', so a trimmed id can never take a live row with it.
]]
local row, active, completed, metrics = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id, token, result, base = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local keep_count, keep_age = tonumber(ARGV[5]), tonumber(ARGV[6])

-- checks, in order: row, token, (idempotent repeat), membership
local fields = redis.call('HMGET', row, 'attempts', 'state')
if not fields[1] then return -1 end
if fields[1] ~= token then return redis.error_reply('EMQSTALE complete token mismatch') end
if fields[2] == 'completed' then return 2 end
if not redis.call('ZSCORE', active, id) then return -3 end

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREM', active, id)
redis.call('HSET', row, 'state', 'completed', 'result', result, 'finished_at', now)
redis.call('ZADD', completed, now, id)
redis.call('HINCRBY', metrics, 'count', 1)
redis.call('PUBLISH', base .. 'events', '{"event":"completed","job":"' .. id .. '"}')

-- retention: a bounded number of the oldest rows per call
local function drop(ids)
  for _, old in ipairs(ids) do
    local jk = base .. 'job:' .. old
    if redis.call('HGET', jk, 'state') == 'completed' then redis.call('DEL', jk, jk .. ':logs') end
  end
  if #ids > 0 then redis.call('ZREM', completed, unpack(ids)) end
end
if keep_age > 0 then
  drop(redis.call('ZRANGEBYSCORE', completed, '-inf', now - keep_age, 'LIMIT', 0, 100))
end
if keep_count >= 0 then
  local excess = redis.call('ZCARD', completed) - keep_count
  if excess > 0 then drop(redis.call('ZRANGE', completed, 0, math.min(excess, 100) - 1)) end
end
return 1
