--[[
  The count-thresholded stalled sweep (docs/runtime.md), with the native twin's semantics.
  KEYS  1 active   ZSET  claimed ids; score = lease deadline ms
        2 pending  ZSET  ready ids
        3 wake     LIST  wake tokens
  ARGV  1 queue base   2 limit (1..MAX_BATCH)   3 max_stalled (reap's order)
  Returns  {recovered ids, dead ids}
  Errors   EMQARG   limit is not 1..MAX_BATCH (nothing written; the verb refuses it first)
  Bound    O(limit * log N); at most MAX_BATCH expired leases per call
           (include/caps.lua)
  Per expired lease: leave active; a lease stamped before the server's last restart
  (lease_epoch missing or another run_id) is recovered without counting; otherwise
  count `stalled`: below max_stalled back to pending, at it dead with last_error 'stalled'.
  An id with no row leaves active, is listed nowhere, and no row is written for it.
  Events   recovered | dead (per job)
  Moves    active -> pending | dead; dead | expired -> (none) (the retention,
           other rows);
           waiting -> pending (its flow parent, docs/flows.md); (none) -> pending (a dead
           job's error callback on its queue, include/link_error.lua)
  A grouped job gives back its group's active slot (`leave_active`) and a recovered one
  goes back to its lane (`ready`; docs/lanes.md).
]]
local active, pending = KEYS[1], KEYS[2]
local base = ARGV[1]
-- @include caps
-- @include stall_sweep
local limit = tonumber(ARGV[2])
local max_stalled = tonumber(ARGV[3])
if not limit or limit < 1 or limit > MAX_BATCH then
  return redis.error_reply('EMQARG stalled_check limit must be 1..' .. MAX_BATCH)
end
return stall_sweep(base, active, pending, limit, true, max_stalled)
