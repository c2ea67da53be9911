--[[
  Everything that says why a job is (not) running, in one atomic read; a read only.
  KEYS  1 row  2 pending  3 schedule  4 active  5 dead  6 completed  7 meta  8 lock
        9 workers (ZSET: worker ids by last beat)  10 waiting  11 children (a flow
        parent's ids)  12 results (its finished children)  13 remote (its children on
        other queues: child id -> <queue>[#<generation>])
  ARGV  1 id   2 queue base (emq:{q}:)
  Returns  -1 no row | {row (flat HGETALL), pending rank | nil, pending count,
           schedule score | nil, active score | nil, dead score | nil, completed score | nil,
           paused (0|1), server run_id, server now ms, lock key exists (0|1),
           the holder's heartbeat record (flat HGETALL; empty when none or expired),
           the holder's last beat ms | nil,
           the group's lane (nil when ungrouped): {lane rank | nil, lane count, active,
           limit | nil, in the ring (0|1), rate window reopens at ms | nil, rate max | nil,
           rate ms | nil, started in the window},
           the queue's rate window (nil when none): {max, ms, started, ms until it reopens}
           (a sliding window: the starts of the last period, the ms until one leaves),
           waiting score | nil, {open children ids: at most 10, of the first 1000},
           {for each of those: {its `:remote` entry | nil (on this queue), its row's
           state | nil (on another queue, or no row)}}, cancelled score | nil,
           {the queue's concurrency | nil, jobs in active (0 without a cap),
           a back-off's end (meta `blocked_until`, server ms) | nil}}
  Events   (none)
  Moves    (none)
  Bound    O(log N): one ZRANK, eight ZSCOREs, the row and the holder's record (a fixed set
           of fields each), for a grouped job a fixed number of reads of its lane's keys
           (docs/lanes.md); a flow parent: its first 1000 children and their outcomes,
           and the state or queue of at most 10 open ones
  A child on another queue is in another slot: the verb reads its state there
  (docs/flows.md "Across queues").
  The holder is the row's `worker` field (written by claim); its record is
  emq:{q}:worker:<id>, in the queue's slot.
]]
local id, base = ARGV[1], ARGV[2]
-- @include time
-- @include run_id
-- @include lanes
local row = redis.call('HGETALL', KEYS[1])
if #row == 0 then return -1 end
local now = now_ms()
local worker, group = nil, nil
for i = 1, #row, 2 do
  if row[i] == 'worker' then worker = row[i + 1] end
  if row[i] == 'group' then group = row[i + 1] end
end
local record, beat = {}, false
if worker then
  record = redis.call('HGETALL', base .. 'worker:' .. worker)
  beat = redis.call('ZSCORE', KEYS[9], worker)
end
local defaults = redis.call('HMGET', KEYS[7], 'group_concurrency', 'group_rate_max',
  'group_rate_ms', 'rate_max', 'rate_ms', 'rate_kind', 'concurrency', 'blocked_until')
local lane = false
if group then
  local own = redis.call('HMGET', base .. 'gstate', group, group .. ':limit', group .. ':rate')
  local max, ms = defaults[2], defaults[3]
  if own[3] then max, ms = string.match(own[3], '^(%d+):(%d+)') end
  lane = {
    redis.call('ZRANK', lane_key(base, group), id),
    redis.call('ZCARD', lane_key(base, group)),
    tonumber(own[1] or '0'),
    own[2] or defaults[1] or false,
    redis.call('ZSCORE', base .. 'gring', group) and 1 or 0,
    redis.call('ZSCORE', base .. 'glimited', group),
    max or false,
    max and ms or false,
    tonumber(redis.call('GET', base .. 'g:' .. group .. ':rate') or '0'),
  }
end
local window = false
if defaults[4] and defaults[6] == 'sliding' then  -- the starts of the last period
  local from = '(' .. (now - tonumber(defaults[5]))
  local used = redis.call('ZCOUNT', base .. 'slide', from, '+inf')
  local first = redis.call('ZRANGEBYSCORE', base .. 'slide', from, '+inf', 'WITHSCORES',
    'LIMIT', math.max(0, used - tonumber(defaults[4])), 1)
  local ttl = first[2] and math.max(1, tonumber(first[2]) + tonumber(defaults[5]) - now) or -1
  window = {defaults[4], defaults[5], used, ttl}
elseif defaults[4] then
  local ttl = redis.call('PTTL', base .. 'rate')
  window = {defaults[4], defaults[5], tonumber(redis.call('GET', base .. 'rate') or '0'), ttl}
end
-- the queue's concurrency (its cap, the jobs in active) and a back-off's end
local queue_hold = {defaults[7] or false, defaults[7] and redis.call('ZCARD', KEYS[4]) or 0,
  defaults[8] or false}
local open_ids, open_where = {}, {}
local kids = redis.call('LRANGE', KEYS[11], 0, 999)
if #kids > 0 then
  local done = redis.call('HMGET', KEYS[12], unpack(kids))
  for i, child in ipairs(kids) do
    if not done[i] and #open_ids < 10 then open_ids[#open_ids + 1] = child end
  end
end
for i, child in ipairs(open_ids) do
  local where = redis.call('HGET', KEYS[13], child)
  open_where[i] = {where, not where and redis.call('HGET', base .. 'job:' .. child, 'state')}
end
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
  record,
  beat,
  lane,
  window,
  redis.call('ZSCORE', KEYS[10], id),
  open_ids,
  open_where,
  redis.call('ZSCORE', base .. 'cancelled', id),
  queue_hold,
}
