--[[
  Mark a queue with this echomq's data layout version (if it has none) and answer the
  version it holds: every worker's check at start (admin.ensure_schema).
  KEYS  1 meta  HASH  schema_version (set if absent: the queue exists from now on)
  ARGV  (none)
  Returns  the queue's schema_version, as stored ('0': none, and `seq` says jobs were
           written: a queue of an echomq from before versions; it is not marked), which
           the verb compares with its own
  Events   (none)
  Moves    (none)
  Bound    O(1)
]]
local meta = KEYS[1]
-- @include schema
return mark_queue(meta)
