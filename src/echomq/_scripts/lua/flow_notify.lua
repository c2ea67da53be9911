--[[
  Tell a flow parent that its child on another queue finished, or runs again (docs/flows.md
  "Across queues"): the workers of the child's queue relay each entry of that queue's
  outbox here. Idempotent and order-safe per child and generation: the parent keeps, in
  its `:remote` hash, the child's generation it last heard of (`<queue>#<gen>`; no `#`:
  0). An entry of an older generation changes nothing; an outcome of the generation heard
  of counts once (a second one: already told); a `reopen` counts once per generation.
  An entry of a newer generation is applied as if the `reopen`s before it came first (a
  relay may deliver them out of order): an outcome of an older generation still recorded
  is taken back (the parent's wait re-opens), then a newer outcome is recorded.
  KEYS  1 row  HASH  the parent (emq:{q}:job:<parent>)
  ARGV  1 queue base (emq:{q}:)   2 parent id   3 child id   4 state (completed | dead |
        cancelled | removed | reopen)   5 value (the result, error or reason; '' for
        removed and reopen)   6 the child's generation (0..)
  Returns  1 told | 2 already told, or an older generation (nothing written) | 0 no such
           parent, or not a flow parent, or the child is not its child on another queue
           (nothing written)
  Errors   EMQARG   an unknown state, or a generation that is not a number (nothing written)
  Events   ready (the parent becomes pending); waiting (a parent whose wait re-opens);
           outbox on the workers' channel (a re-opened dead parent whose own parent is on
           another queue: its `reopen` entry)
  Moves    waiting -> pending (the parent: no child open, or policy fail and a child
           failed); pending | dead -> waiting (a re-opened parent, and dead ancestors)
  Bound    O(depth * log N): the parent, and at most 32 flow ancestors re-opened
           (include/reopen.lua, FLOW_MAX_DEPTH)
  A `reopen` re-opens as reprocess_job does for a parent on the child's own queue
  (include/reopen.lua): a parent running or completed is left alone, and a newer outcome
  for it is then not recorded either (the child ran again by itself).
]]
local row = KEYS[1]
local base, parent, child, state, value = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local gen = tonumber(ARGV[6])
-- @include finished
-- @include reopen
if not FLOW_MARK[state] and state ~= 'reopen' then
  return redis.error_reply('EMQARG flow_notify: unknown state ' .. tostring(state))
end
if not gen or gen < 0 or gen ~= math.floor(gen) then
  return redis.error_reply('EMQARG flow_notify: the generation must be a number 0..')
end
-- checks, in order: a parent row, a flow parent, its remote child, the generation
local f = redis.call('HMGET', row, 'state', 'kids')
if not f[1] or not f[2] then return 0 end
local where = redis.call('HGET', row .. ':remote', child)
if not where then return 0 end
local queue, heard = string.match(where, '^([^#]*)#?(%d*)$')
heard = tonumber(heard) or 0
local told = redis.call('HEXISTS', row .. ':results', child) == 1
if gen < heard or (gen == heard and (state == 'reopen' or told)) then return 2 end
-- a newer generation (a reopen, or an outcome whose reopen has not come yet), or the
-- outcome of the generation heard of, not yet told
local up = false
if gen > heard and told then up = reopen_read(base, child, parent) end
local reopened = up and #up.steps > 0
local p = false
if state ~= 'reopen' and (reopened or not told) then p = flow_read(base, {}, parent) end

if gen > heard then redis.call('HSET', row .. ':remote', child, queue .. '#' .. gen) end
if up then reopen(base, up) end
if p then
  if reopened then p.state = 'waiting' end
  flow_notify(base, p, child, state, value)
end
return 1
