--[[
  The retention sweep: the finished-state indexes and the completions stream lose what
  retention has ended, at most `limit` entries per call (docs/results.md, "Cleanup").
  KEYS  1 meta         HASH    the queue's retention settings
        2 completions  STREAM  one entry per finished job
  ARGV  1 queue base   2 limit (1..MAX_SWEEP): index and stream entries per call
  Returns  {index entries removed, rows deleted, stream entries trimmed, more (0|1)}
           (more: the call stopped at its limit; call again at once)
  Errors   EMQARG   limit is not 1..MAX_SWEEP (nothing written; the verb refuses it first)
  Events   (none)
  Moves    completed -> (none); dead -> (none) (a row of echomq 0.1, with no TTL, whose time is up)
  Bound    O(limit * log N); at most MAX_SWEEP index and stream entries per call
           (include/caps.lua). With nothing to do: TIME, one HMGET, one ZRANGEBYSCORE per
           index and one XRANGE, each finding nothing.
  The indexes are FINISHED_INDEXES (include/retention.lua), each `base .. name`, scored by
  when its member's retention ends. A member scored before now is looked at by its row's
  PTTL: no row (Redis deleted it at its TTL) leaves the index; a row with a TTL stays and
  is scored again by it (the sweep never removes a live row, nor its entry); a row with no
  TTL in the index's state is a row of echomq 0.1: it gets its TTL (finished_at + the
  queue's keep), or is deleted with its logs when that time is past; a row with no TTL in
  another state (it lives on elsewhere) only leaves the index. The stream loses its
  entries older than now - completions_keep, exactly (XTRIM MINID =), at most what is left
  of `limit` of them. Concurrent sweeps are safe: each call is atomic, and a second one
  finds what the first left.
]]
-- @include caps
-- @include time
-- @include retention
local meta, stream = KEYS[1], KEYS[2]
local base = ARGV[1]
local limit = tonumber(ARGV[2])
if not limit or limit < 1 or limit > MAX_SWEEP then
  return redis.error_reply('EMQARG retention_sweep limit must be 1..' .. MAX_SWEEP)
end
local now = now_ms()
local names = {'completions_keep'}
for i, set in ipairs(FINISHED_INDEXES) do names[i + 1] = set[2] end
local settings = redis.call('HMGET', meta, unpack(names))
local budget, more = limit, false
-- reads first (docs/lua.md, rule 1): each index's ended members and their rows
local plans = {}
local before = '(' .. now
for i, set in ipairs(FINISHED_INDEXES) do
  if budget == 0 then
    more = true
    break
  end
  local name = set[1]
  local index = base .. name
  local keep = tonumber(settings[i + 1]) or RETENTION_DEFAULTS[set[2]]
  local ids = redis.call('ZRANGEBYSCORE', index, '-inf', before, 'LIMIT', 0, budget + 1)
  if #ids > budget then
    more = true
    ids[#ids] = nil
  end
  budget = budget - #ids
  local plan = {index = index, gone = {}, rescore = {}, migrate = {}, delete = {}}
  for _, id in ipairs(ids) do
    local row = base .. 'job:' .. id
    local ttl = redis.call('PTTL', row)
    if ttl == -2 then
      plan.gone[#plan.gone + 1] = id
    elseif ttl >= 0 then  -- a live row: its entry follows its TTL
      plan.rescore[#plan.rescore + 1] = {now + ttl, id}
    else
      local f = redis.call('HMGET', row, 'state', 'finished_at')
      if f[1] == name then  -- a row of echomq 0.1 (no TTL)
        redis.call('EXISTS', row .. ':logs')
        local ends = (tonumber(f[2]) or now) + keep
        if ends > now then
          plan.migrate[#plan.migrate + 1] = {ends, id, row}
        else
          plan.delete[#plan.delete + 1] = {id, row}
        end
      else  -- the row lives on in another state
        plan.gone[#plan.gone + 1] = id
      end
    end
  end
  plans[#plans + 1] = plan
end
local trim_to, trimmed = nil, 0
local cut = now - (tonumber(settings[1]) or RETENTION_DEFAULTS.completions_keep)
if budget > 0 and cut > 0 then
  -- the entries older than cut (their ids' ms below it), at most budget of them
  local old = redis.call('XRANGE', stream, '-', tostring(cut - 1), 'COUNT', budget + 1)
  if #old > budget then
    trim_to, trimmed, more = old[budget + 1][1], budget, true
  elseif #old > 0 then
    trim_to, trimmed = tostring(cut), #old
  end
elseif budget == 0 then
  more = true
end
-- the writes
local removed, deleted = 0, 0
for _, plan in ipairs(plans) do
  local index, gone = plan.index, plan.gone
  for _, d in ipairs(plan.delete) do
    redis.call('DEL', d[2], d[2] .. ':logs')
    gone[#gone + 1] = d[1]
    deleted = deleted + 1
  end
  for i = 1, #gone, 100 do
    redis.call('ZREM', index, unpack(gone, i, math.min(i + 99, #gone)))
  end
  removed = removed + #gone
  for _, m in ipairs(plan.migrate) do
    redis.call('PEXPIREAT', m[3], m[1])
    redis.call('PEXPIREAT', m[3] .. ':logs', m[1])
    redis.call('ZADD', index, m[1], m[2])
  end
  for _, r in ipairs(plan.rescore) do
    redis.call('ZADD', index, r[1], r[2])
  end
end
if trim_to then
  trimmed = redis.call('XTRIM', stream, 'MINID', '=', trim_to)
end
return {removed, deleted, trimmed, more and 1 or 0}
