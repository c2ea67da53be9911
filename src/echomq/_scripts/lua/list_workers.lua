--[[
  The workers of a queue, newest beat first, and the pruning of those long gone.
  KEYS  1 workers  ZSET  worker ids; score = last beat ms (server clock)
  ARGV  1 queue base (emq:{q}:)   2 limit (1..MAX_BATCH)   3 keep gone ms (a worker whose
        record expired stays listed, as gone, this long after its last beat)
  Returns  {now ms, then per worker: id, last beat ms, its record (flat HGETALL; empty:
           gone, the record expired)}
  Errors   EMQARG   limit is not 1..MAX_BATCH (nothing written; the verb refuses it first)
  Events   (none)
  Moves    (none)
  Bound    O(limit * (log W + fields)); at most MAX_BATCH workers listed and MAX_BATCH
           pruned per call (include/caps.lua)
  Reads first: the newest `limit` entries and their records, then the entries older than
  keep (oldest first, at most `limit`) and whether their records exist; then those with
  no record leave the list (ZREM). A live worker is never pruned: its record exists.
]]
local workers, base = KEYS[1], ARGV[1]
-- @include caps
-- @include time
local limit, keep = tonumber(ARGV[2]), tonumber(ARGV[3])
if not limit or limit < 1 or limit > MAX_BATCH then
  return redis.error_reply('EMQARG list_workers limit must be 1..' .. MAX_BATCH)
end
local now = now_ms()
local out = {now}
local newest = redis.call('ZREVRANGE', workers, 0, limit - 1, 'WITHSCORES')
for i = 1, #newest, 2 do
  local id = newest[i]
  out[#out + 1] = id
  out[#out + 1] = newest[i + 1]
  out[#out + 1] = redis.call('HGETALL', base .. 'worker:' .. id)
end
local old = redis.call('ZRANGEBYSCORE', workers, '-inf', now - keep, 'LIMIT', 0, limit)
local gone = {}
for _, id in ipairs(old) do
  if redis.call('EXISTS', base .. 'worker:' .. id) == 0 then gone[#gone + 1] = id end
end
if #gone > 0 then redis.call('ZREM', workers, unpack(gone)) end
return out
