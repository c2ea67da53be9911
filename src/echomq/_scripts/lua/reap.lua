--[[
  Crash recovery, the forgiving path: every expired lease goes back to pending, counted,
  until a job has been recovered max_recoveries times; its next stall dead-letters it.
  KEYS  1 active   ZSET  claimed ids; score = lease deadline ms
        2 pending  ZSET  ready ids
        3 wake     LIST  wake tokens
  ARGV  1 queue base   2 limit (1..MAX_BATCH)   3 max_recoveries (-1: count nothing, never dead:
        the contract's plain reap)
  Returns  {recovered ids, dead ids}
  Errors   EMQARG   limit is not 1..MAX_BATCH (nothing written; the verb refuses it first)
  Per expired lease (at most limit): leave active; a lease stamped before the server's
  last restart (lease_epoch missing or another run_id) is recovered without counting;
  otherwise count `stalled` (a claim followed by a crash is never free, so a job that
  kills its worker is bounded): back to pending while stalled <= max_recoveries, dead past
  it with last_error 'stalled'. stalled_check is the same sweep, dead at its threshold.
  An id with no row leaves active, is listed nowhere, and no row is written for it.
  Events   recovered | dead (per job)
  Moves    active -> pending | dead; dead | expired -> (none) (the retention,
           other rows);
           waiting -> pending (its flow parent, docs/flows.md); (none) -> pending (a dead
           job's error callback on its queue, include/link_error.lua)
  Bound    O(limit * log N); at most MAX_BATCH expired leases per call (include/caps.lua),
           plus the dead retention's cleanup (at most 100 + 100 index entries per call)
  A dead job finishes (include/finished.lua: its completions entry, counters, retention).
  A grouped job gives back its group's active slot (`leave_active`) and a recovered one
  goes back to its lane (`ready`; docs/lanes.md).
]]
local active, pending = KEYS[1], KEYS[2]
local base = ARGV[1]
-- @include caps
-- @include stall_sweep
local limit = tonumber(ARGV[2])
local max_recoveries = tonumber(ARGV[3])
if not limit or limit < 1 or limit > MAX_BATCH then
  return redis.error_reply('EMQARG reap limit must be 1..' .. MAX_BATCH)
end
-- max_recoveries -1: the contract's plain reap (nothing counted, nobody dies)
return stall_sweep(base, active, pending, limit, max_recoveries >= 0, max_recoveries + 1)
