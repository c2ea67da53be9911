--[[
  List a queue's held flow roots (docs/flows.md "Held roots"): roots waiting for pages of
  their flow that were never written (the producer stopped between pages), a page of the
  waiting set at a time; a read only.
  KEYS  1 waiting   ZSET  flow parents with open children; score = when they began to wait
  ARGV  1 queue base (emq:{q}:)   2 offset (>= 0)   3 count (1..MAX_FLOW_PAGE)
  Returns  {server now ms, waiting parents read, {id, created_at, pages, kids, ...}}: the
           held roots among the waiting set's members offset .. offset + count - 1 (the
           longest waiting first); pages = the flow's pages written on this queue, kids =
           its children written so far
  Errors   EMQARG   offset or count out of range
  Events   (none)
  Moves    (none)
  Bound    O(count): one ZRANGE and one HMGET per waiting parent, at most MAX_FLOW_PAGE
           (include/caps.lua)
  A held root is a waiting row with `held` and no `parent`: a held parent below the root
  is part of the same flow and goes with it.
]]
-- @include caps
-- @include time
local waiting = KEYS[1]
local base, offset, count = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if not offset or offset < 0 or not count or count < 1 or count > MAX_FLOW_PAGE then
  return redis.error_reply('EMQARG flow_held reads 1..' .. MAX_FLOW_PAGE .. ' waiting parents')
end
local ids = redis.call('ZRANGE', waiting, offset, offset + count - 1)
local out = {}
for _, id in ipairs(ids) do
  local f = redis.call('HMGET', base .. 'job:' .. id, 'held', 'parent', 'created_at', 'pages', 'kids')
  if f[1] == '1' and not f[2] then
    out[#out + 1] = id
    out[#out + 1] = f[3] or '0'
    out[#out + 1] = f[4] or '0'
    out[#out + 1] = f[5] or '0'
  end
end
return {now_ms(), #ids, out}
