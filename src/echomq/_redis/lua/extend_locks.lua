--[[
  Checkpoint many leases in one call: extend_lock's checks and re-score, id by id.
  KEYS  1 active  ZSET  claimed ids; score = lease deadline ms
  ARGV  1 queue base   2 lease_ms   then pairs: id, token
  Returns  one code per pair, in order: 1 ok | -1 no row | -2 stale token | -3 not active
  All reads and checks run before the first write.
]]
local active, base = KEYS[1], ARGV[1]
local lease = tonumber(ARGV[2])
local codes, ok_ids = {}, {}
for i = 3, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  local att = redis.call('HGET', base .. 'job:' .. id, 'attempts')
  local code = 1
  if not att then code = -1
  elseif att ~= token then code = -2
  elseif not redis.call('ZSCORE', active, id) then code = -3
  else ok_ids[#ok_ids + 1] = id end
  codes[#codes + 1] = code
end
if #ok_ids > 0 then
  local t = redis.call('TIME')
  local deadline = t[1] * 1000 + math.floor(t[2] / 1000) + lease
  local run_id = string.match(redis.call('INFO', 'server'), 'run_id:(%w+)')
  local args = {}
  for _, id in ipairs(ok_ids) do
    args[#args + 1] = deadline
    args[#args + 1] = id
    redis.call('HSET', base .. 'job:' .. id, 'lease_epoch', run_id)
  end
  redis.call('ZADD', active, unpack(args))
end
return codes
