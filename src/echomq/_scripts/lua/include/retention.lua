-- A queue's retention settings (docs/results.md) and each one's default, used while the
-- queue's meta hash does not set it: times in ms, counts. Written here once: the finishing
-- scripts (include/finished.lua), add_log and set_retention read this table, and Python
-- reads its names and numbers at import (_model/retention.py).
local RETENTION_DEFAULTS = {
  keep_result = 86400000,  -- a completed (or cancelled) row: 24 h
  keep_dead = 604800000,  -- a dead row: 7 days
  completions_keep = 86400000,  -- a completions entry: 24 h
  completions_max = 1000000,  -- completions entries (the memory guard)
  max_completed = 1000000,  -- completed rows kept (the memory guard)
  max_dead = 1000000,  -- dead rows kept (the memory guard)
  max_log_lines = 1000,  -- a job's log lines, when add_log is given no keep
  keep_payload = 1,  -- a completed (or cancelled) row keeps its payload (0: it does not)
}
-- The finished-state indexes, each `emq:{q}:<name>` (a ZSET scored by when each member's
-- retention ends), with the setting that times its rows: the retention sweep
-- (retention_sweep.lua) trims each of them, in this order. A new finished state with an
-- index of its own is one line here.
local FINISHED_INDEXES = {
  {'completed', 'keep_result'},
  {'dead', 'keep_dead'},
  {'cancelled', 'keep_result'},
}
