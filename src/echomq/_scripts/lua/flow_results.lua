--[[
  Read a flow parent's children and their outcomes, a page at a time; a read only.
  KEYS  1 row       HASH  the parent
        2 children  LIST  its children ids, in order
        3 results   HASH  child id -> outcome (c | d | x | r, then result | error | reason)
  ARGV  1 offset (>= 0)   2 count (1..MAX_FLOW_PAGE)
  Returns  -1 no row | {policy, feed, kids, open, failed, held (0|1), total children,
           {id, outcome or false, ...} of children offset .. offset + count - 1, state}
  Errors   EMQARG   count is not 1..MAX_FLOW_PAGE
  Events   (none)
  Moves    (none)
  Bound    O(count): one LRANGE and one HMGET of at most MAX_FLOW_PAGE
           children (include/caps.lua)
]]
-- @include caps
local row, children, results = KEYS[1], KEYS[2], KEYS[3]
local offset, count = tonumber(ARGV[1]), tonumber(ARGV[2])
if not offset or offset < 0 or not count or count < 1 or count > MAX_FLOW_PAGE then
  return redis.error_reply('EMQARG flow_results reads 1..' .. MAX_FLOW_PAGE .. ' children')
end
local f = redis.call('HMGET', row, 'policy', 'feed', 'kids', 'open', 'failed', 'held', 'state')
if not f[7] then return -1 end
local ids = redis.call('LRANGE', children, offset, offset + count - 1)
local page = {}
if #ids > 0 then
  local values = redis.call('HMGET', results, unpack(ids))
  for i, id in ipairs(ids) do
    page[#page + 1] = id
    page[#page + 1] = values[i]
  end
end
return {f[1] or 'fail', f[2] or 'none', tonumber(f[3] or '0'), tonumber(f[4] or '0'),
  tonumber(f[5] or '0'), f[6] and 1 or 0, redis.call('LLEN', children), page, f[7]}
