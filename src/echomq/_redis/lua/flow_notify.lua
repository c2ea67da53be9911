--[[
  Tell a flow parent that its child on another queue finished (docs/flows.md "Across
  queues"): the sweeper of the child's queue relays each entry of that queue's outbox
  here. Idempotent per child: an outcome already recorded changes nothing, so an entry
  relayed twice (its relay died before acknowledging it) counts once.
  KEYS  1 row  HASH  the parent (emq:{q}:job:<parent>)
  ARGV  1 queue base (emq:{q}:)   2 parent id   3 child id   4 state (completed | dead |
        cancelled | removed)   5 value (the result, error or reason; '' for removed)
  Returns  1 told | 2 already told (nothing written) | 0 no such parent, or not a flow
           parent, or the child is not its child (nothing written)
  Errors   EMQARG   an unknown state (nothing written)
  Events   ready (the parent becomes pending)
  Moves    waiting -> pending (the parent: no child open, or policy fail and a child failed)
  Bound    O(K + log N), K the parent's children (one LPOS over its children list; a
           10,000-member chord: a scan of 10,000 ids)
]]
local row = KEYS[1]
local base, parent, child, state, value = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
-- @include score
-- @include wake
-- @include lanes
-- @include ready
-- @include finished
if not FLOW_MARK[state] then
  return redis.error_reply('EMQARG flow_notify: unknown state ' .. tostring(state))
end
-- checks, in order: a parent row, a flow parent, its child, not told yet
local f = redis.call('HMGET', row, 'state', 'kids')
if not f[1] or not f[2] then return 0 end
if not redis.call('LPOS', row .. ':children', child) then return 0 end
if redis.call('HEXISTS', row .. ':results', child) == 1 then return 2 end
local p = flow_read(base, {}, parent)
flow_notify(base, p, child, state, value)
return 1
