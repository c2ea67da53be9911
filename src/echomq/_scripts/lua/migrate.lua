--[[
  Migrate one queue to this echomq's data layout (include/schema.lua: version 2), a page
  of keys per call, so no call holds Redis for long. Idempotent: a row already rewritten
  is left as it is, a queue of this version answers done and writes nothing.
  KEYS  1 meta   HASH  schema_version (written last: workers refuse the queue until then)
        derived from the base (the queue's slot): job:<id> rows, completed, cancelled,
        metrics:failed, metrics:dead
  ARGV  1 queue base (emq:{q}:)   2 cursor ('0' to begin: the SCAN cursor of the last
        call)   3 budget (keys per page, 1..MAX_BUDGET)
  Returns  {done (1 | 0), cursor for the next call, rows rewritten by this call}
  Errors   EMQARG     budget out of range (nothing written)
           EMQSCHEMA  the queue has a version newer than this script's (nothing written)
  Events   (none)
  Moves    (none)
  Bound    one SCAN page (COUNT budget: at most MAX_BUDGET) of the queue's keyspace and its
           rows, each an O(1) rewrite in place (a row keeps its set); the last call renames
           one counter and writes the version
  A row of layout 1 names the fencing token `attempts`: it becomes `token` (a row holding
  both, written by producers of both layouts, keeps the larger: a stale holder stays
  stale). A row of layout 1 in state `completed` with the result `cancelled:<reason>` is
  a cancelled job: it becomes state `cancelled` with `cancel_reason` = the reason (the
  result field goes), and moves from the `completed` index to `cancelled`, its score (when
  its retention ends) kept: not a move, the job was cancelled all along. The dead-letter
  total metrics:failed becomes metrics:dead (their counts added,
  when both exist). Workers of the old layout must be stopped first: a row they write
  during the migration is read again only if its page comes later.
  The queue's keys are read by SCAN (MATCH emq:{q}:job:*): a row is a key whose name
  has no ':' after its id (ids have none), of type hash.
]]
-- @include caps
-- @include schema
local meta, base = KEYS[1], ARGV[1]
local cursor, budget = ARGV[2], tonumber(ARGV[3])
if not budget or budget < 1 or budget > MAX_BUDGET then
  return redis.error_reply('EMQARG migrate takes a budget of 1..' .. MAX_BUDGET)
end
local found = redis.call('HGET', meta, 'schema_version')
if found == SCHEMA_TEXT then return {1, '0', 0} end
if found and tonumber(found) and tonumber(found) > SCHEMA_VERSION then
  return redis.error_reply('EMQSCHEMA the queue ' .. meta .. ' has data layout version '
    .. found .. ', newer than this echomq\'s ' .. SCHEMA_TEXT .. ': upgrade echomq')
end

local page = redis.call('SCAN', cursor, 'MATCH', base .. 'job:*', 'COUNT', budget)
local last = page[1] == '0'
local old, new = base .. 'metrics:failed', base .. 'metrics:dead'
local count = nil
if last then
  count = redis.call('HGET', old, 'count')
  redis.call('EXISTS', new)  -- read: a key moved mid-reshard fails here
end
local completed, cancelled_set = base .. 'completed', base .. 'cancelled'
redis.call('EXISTS', cancelled_set)  -- read: a key moved mid-reshard fails here
local rows = {}
local skip = #base + 5  -- where the id starts in 'emq:{q}:job:<id>'
for _, key in ipairs(page[2]) do
  if not string.find(key, ':', skip, true) then
    local f = redis.call('HMGET', key, 'attempts', 'token', 'state', 'result')
    local cancelled = f[3] == 'completed' and f[4] and string.sub(f[4], 1, 10) == 'cancelled:'
    if f[1] or cancelled then
      local r = {key = key, attempts = f[1], token = f[2]}
      if cancelled then
        r.id = string.sub(key, skip)
        r.reason = string.sub(f[4], 11)
        r.score = redis.call('ZSCORE', completed, r.id)
      end
      rows[#rows + 1] = r
    end
  end
end
-- writes
for _, r in ipairs(rows) do
  if r.attempts then
    local token = r.attempts
    if r.token and tonumber(r.token) > tonumber(token) then token = r.token end
    redis.call('HSET', r.key, 'token', token)
    redis.call('HDEL', r.key, 'attempts')
  end
  if r.reason then
    redis.call('HSET', r.key, 'state', 'cancelled', 'cancel_reason', r.reason)
    redis.call('HDEL', r.key, 'result')
    if r.score then
      redis.call('ZREM', completed, r.id)
      redis.call('ZADD', cancelled_set, r.score, r.id)
    end
  end
end
if not last then return {0, page[1], #rows} end
if count then
  redis.call('HINCRBY', new, 'count', count)
  redis.call('DEL', old)
end
redis.call('HSET', meta, 'schema_version', SCHEMA_VERSION)
return {1, '0', #rows}
