-- The caps every layer agrees on, each written here once: Python reads every
-- `local MAX_... = <digits>` line at import (_model/caps.py) and gates the verbs and the
-- task options with them before any I/O; a script whose work grows with an argument checks
-- it against its cap again, before its first write (EMQARG; docs/lua.md, rule 8).
-- Every bound keeps the scripts' arithmetic exact: a score is a double, so
-- priority * BAND + seq (include/score.lua) and now + a lease stay below 2^53, and a batch
-- stays below unpack's limit.
local MAX_PRIORITY = 4095  -- |priority| * 2^40 + seq stays an exact double
local MAX_MS = 1099511627776  -- 2^40 ms: a lease or delay of ~34 years; now + it stays exact
local MAX_ATTEMPTS = 1000000  -- handler failures a job may have: a sane bound
local MAX_LIMIT = 1000000000  -- a group's concurrency, a rate limit's jobs per period
local MAX_SETTING = 1099511627776  -- 2^40: a retention count setting (exact in a double)
-- The work one call does: chosen so that no call blocks Redis for more than ~10 ms on a
-- queue of 1M jobs (`python -m benchmarks bounds`).
local MAX_COUNT = 250  -- jobs per claim
local MAX_ENQUEUE = 250  -- jobs per enqueue call
local MAX_BATCH = 100  -- expired leases per reap / stalled sweep, cancels per fence_cancels,
                       -- records per list_workers
local MAX_HELD = 250  -- a worker's held jobs per call: (id, token) pairs per extend_locks /
                      -- release, (id, token, result) triples per complete_many
local MAX_FLOW = 250  -- nodes (and held parents released) per add_flow call: a page
local MAX_FLOW_PAGE = 1000  -- a flow parent's children read per flow_results call
local MAX_BUDGET = 500  -- jobs (or leftover keys, groups) per drain / obliterate /
                        -- lanes_rejoin step
local MAX_REPEAT_PAGE = 100  -- repeat records per repeat_due / repeat_list call
local MAX_SWEEP = 500  -- index and stream entries per retention sweep call
local MAX_MINUTES = 720  -- minutes of per-minute counters one stats call reads
local MAX_BEAT_FIELDS = 32  -- field pairs of one worker heartbeat record
