--[[
  Commit a durable step's record into its job's row (docs/steps.md), fenced by the token.
  KEYS  1 row     HASH  the job
        2 active  ZSET  claimed ids
  ARGV  1 id   2 token   3 field (step:<name>)   4 the record
  Returns  1 committed | 0 the row already holds this step (nothing written) | -1 no row |
           -2 stale token | -3 not in active
  Events   (none)
  Moves    (none)
  Bound    O(log N)
  The checks run in extend_lock's order: row, token, membership. Only the holder of the
  job's current claim commits a step, so a stale holder's step is never kept; a record
  once written is never replaced (a later run reads it instead of running the step).
]]
local row, active = KEYS[1], KEYS[2]
local token = redis.call('HGET', row, 'token')
if not token then return -1 end
if token ~= ARGV[2] then return -2 end
if not redis.call('ZSCORE', active, ARGV[1]) then return -3 end
return redis.call('HSETNX', row, ARGV[3], ARGV[4])
