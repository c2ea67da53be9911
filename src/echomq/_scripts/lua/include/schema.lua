-- mark_queue(meta): a queue exists when its meta hash does; the script that may create a
-- queue's first key writes schema_version there (if absent), the layout's version. Workers
-- refuse a queue whose version is not theirs (echomq.admin.queues.ensure_schema), and so
-- do the scripts that write rows (open_queue). A meta without a version but with `seq`
-- was written by an echomq from before versions (its rows are of layout 1): it is not
-- marked (migrate.lua rewrites it and marks it).
-- Version 2: the fencing token is the row's `token` (was `attempts`), a cancelled job is
-- kept in state `cancelled` (was `completed` with the result `cancelled:<reason>`) and
-- the `cancelled` index, and the dead-letter total is metrics:dead (was metrics:failed).
local SCHEMA_VERSION = 2
local SCHEMA_TEXT = '2'
-- A queue marked here with nothing else in its meta (a new queue) also gets `logs` = 0: no
-- job of it has a log list (add_log sets 1), so its finishing scripts need not read every
-- finished job's logs key (include/finished.lua). Absent (a queue from before the field)
-- reads as 1. The operator's verbs (pause, resume, drain, obliterate, set_retention,
-- set_limits) never create a queue: each refuses a missing meta hash (EMQNOQUEUE).
-- Answers the queue's version as stored ('0': none, of a queue from before versions).
local function mark_queue(meta)
  local found = redis.call('HGET', meta, 'schema_version')
  if found then return found end
  if redis.call('HEXISTS', meta, 'seq') == 1 then return '0' end
  redis.call('HSET', meta, 'schema_version', SCHEMA_VERSION)
  if redis.call('HLEN', meta) == 1 then redis.call('HSET', meta, 'logs', '0') end
  return SCHEMA_TEXT
end
-- open_queue(meta): mark_queue, refusing (before its first write, EMQSCHEMA) a queue of
-- another layout: a producer never writes rows that the queue's workers would misread.
local function open_queue(meta)
  local found = mark_queue(meta)
  if found ~= SCHEMA_TEXT then
    error({err = 'EMQSCHEMA the queue ' .. meta .. ' has data layout version ' .. found
      .. ', not this echomq\'s ' .. SCHEMA_TEXT .. ': an older one is migrated by '
      .. '`echomq migrate QUEUE` (admin.migrate), a newer one needs a newer echomq'})
  end
end
