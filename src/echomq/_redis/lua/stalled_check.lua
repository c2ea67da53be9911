--[[
  The count-thresholded stalled sweep (docs/runtime.md), with the native twin's semantics.
  KEYS  1 active   ZSET  claimed ids; score = lease deadline ms
        2 pending  ZSET  ready ids
        3 wake     LIST  wake tokens
  ARGV  1 queue base   2 max_stalled   3 limit (1..100)
  Returns  {recovered ids, dead ids}
  Errors   EMQARG   limit is not 1..100 (nothing written; the verb refuses it first)
  Bound    O(limit * log N); at most 100 expired leases per call (validate.MAX_BATCH)
  Per expired lease: leave active; a lease stamped before the server's last restart
  (lease_epoch missing or another run_id) is recovered without counting; otherwise
  count `stalled`: below max_stalled back to pending, at it dead with last_error 'stalled'.
  An id with no row leaves active, is listed nowhere, and no row is written for it.
  Events   recovered | dead (per job)
  Moves    active -> pending | dead; dead -> (none) (the retention, other rows);
           waiting -> pending (its flow parent, docs/flows.md)
  A grouped job gives back its group's active slot (`leave_active`) and a recovered one
  goes back to its lane (`ready`; docs/lanes.md).
]]
local active, pending, wake = KEYS[1], KEYS[2], KEYS[3]
local base = ARGV[1]
-- @include time
-- @include score
-- @include wake
-- @include run_id
-- @include lanes
-- @include ready
-- @include leave_active
-- @include finished
local max_stalled = tonumber(ARGV[2])
local MAX_LIMIT = 100
local limit = tonumber(ARGV[3])
if not limit or limit < 1 or limit > MAX_LIMIT then
  return redis.error_reply('EMQARG stalled_check limit must be 1..' .. MAX_LIMIT)
end
local now = now_ms()
local expired = redis.call('ZRANGEBYSCORE', active, '-inf', now, 'LIMIT', 0, limit)
if #expired == 0 then return {{}, {}} end
local run_id = server_run_id()

-- reads first: each row's epoch, stall count and priority; then who dies, and what
-- finishing them reads
local rows, plan, dying = {}, {}, {}
for i, id in ipairs(expired) do
  local f = redis.call('HMGET', base .. 'job:' .. id, 'state', 'lease_epoch', 'stalled', 'priority',
    'group')
  rows[i] = f
  if f[5] then lanes_touch(base, f[5]) end
  if f[1] and f[2] == run_id then
    local stalled = tonumber(f[3] or '0') + 1
    plan[i] = {stalled = stalled, dies = stalled >= max_stalled}
    if plan[i].dies then
      dying[#dying + 1] = {id, 'dead'}
      plan[i].n = #dying
    end
  end
end
local fin = #dying > 0 and finish_read(base, 'dead', now, dying)

local recovered, died = {}, {}
local channel = base .. 'events'
for i, id in ipairs(expired) do
  local f, p = rows[i], plan[i]
  leave_active(base, active, id, f[5])
  if f[1] then
    local jk = base .. 'job:' .. id
    if p then redis.call('HSET', jk, 'stalled', p.stalled) end
    if p and p.dies then
      redis.call('HSET', jk, 'state', 'dead', 'last_error', 'stalled', 'finished_at', now)
      redis.call('PUBLISH', channel, '{"event":"dead","job":"' .. id .. '","error":"stalled"}')
      finished(fin, p.n, {error = 'stalled'})
      died[#died + 1] = id
    else
      redis.call('HSET', jk, 'state', 'pending')
      ready(base, pending, id, f[5], band_score(f[4] or '0', 0))
      redis.call('PUBLISH', channel, '{"event":"recovered","job":"' .. id .. '"}')
      recovered[#recovered + 1] = id
    end
  end
end
return {recovered, died}
