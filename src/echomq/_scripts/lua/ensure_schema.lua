--[[
  Mark a queue with this echomq's data layout version (if it has none) and answer the
  version it holds: every worker's check at start (admin.ensure_schema).
  KEYS  1 meta  HASH  schema_version (set if absent: the queue exists from now on)
  ARGV  (none)
  Returns  the queue's schema_version, as stored (the verb compares it with its own)
  Events   (none)
  Moves    (none)
  Bound    O(1)
]]
local meta = KEYS[1]
-- @include schema
mark_queue(meta)
return redis.call('HGET', meta, 'schema_version')
