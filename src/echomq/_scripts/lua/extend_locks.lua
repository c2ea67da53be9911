--[[
  Checkpoint many leases in one call: extend_lock's checks and re-score, id by id.
  KEYS  1 active  ZSET  claimed ids; score = lease deadline ms
  ARGV  1 queue base   2 lease_ms   then pairs: id, token (at most MAX_HELD pairs)
  Returns  one code per pair, in order: 1 ok | 3 ok, and the job has a cancel request
           | -1 no row | -2 stale token | -3 not active; then, for each pair answered 3
           in order, its cancel reason (nil when none was given)
  Errors   EMQARG   more than MAX_HELD pairs (nothing written; the verb refuses them first)
  Events   (none)
  Moves    (none)
  Bound    O(pairs * log N); at most MAX_HELD pairs per call (include/caps.lua)
  Per pair the checks run in extend_lock's order (row, token, membership), and every
  pair is checked before the first write. One ZMSCORE, one TIME, one INFO and one ZADD
  per 256 ids; lease_epoch is written only on rows whose stamp differs from the run_id.
  A held job whose row carries cancel_requested (cancel.lua) is extended like any other
  and answered 3: the worker stops it and completes it as cancelled.
]]
-- @include caps
-- @include time
-- @include run_id
local active, base = KEYS[1], ARGV[1]
local lease = tonumber(ARGV[2])
if (#ARGV - 2) / 2 > MAX_HELD then
  return redis.error_reply('EMQARG extend_locks takes at most ' .. MAX_HELD .. ' pairs')
end
-- reads first: every row's token and stamp, then membership of all ids in one ZMSCORE
local ids, rows = {}, {}
for i = 3, #ARGV, 2 do
  local id = ARGV[i]
  ids[#ids + 1] = id
  rows[#rows + 1] = redis.call('HMGET', base .. 'job:' .. id, 'token', 'lease_epoch',
    'cancel_requested', 'cancel_reason')
end
local scores = {}
for first = 1, #ids, 256 do  -- (unpack stays well under Lua's stack limit)
  local part = redis.call('ZMSCORE', active, unpack(ids, first, math.min(first + 255, #ids)))
  for _, score in ipairs(part) do scores[#scores + 1] = score end
end
local codes, ok_ids, restamp, reasons = {}, {}, {}, {}
for n, id in ipairs(ids) do
  local f = rows[n]
  local code = 1
  if not f[1] then code = -1
  elseif f[1] ~= ARGV[2 + 2 * n] then code = -2
  elseif not scores[n] then code = -3
  else
    ok_ids[#ok_ids + 1] = id
    restamp[#ok_ids] = f[2]
    if f[3] then
      code = 3
      reasons[#reasons + 1] = f[4] or false
    end
  end
  codes[n] = code
end
if #ok_ids > 0 then
  local deadline = now_ms() + lease
  local run_id = server_run_id()
  local args = {}
  for n, id in ipairs(ok_ids) do
    args[#args + 1] = deadline
    args[#args + 1] = id
    if #args == 512 then
      redis.call('ZADD', active, unpack(args))
      args = {}
    end
    if restamp[n] ~= run_id then redis.call('HSET', base .. 'job:' .. id, 'lease_epoch', run_id) end
  end
  if #args > 0 then redis.call('ZADD', active, unpack(args)) end
end
for _, reason in ipairs(reasons) do codes[#codes + 1] = reason end
return codes
