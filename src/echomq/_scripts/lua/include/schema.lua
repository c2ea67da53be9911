-- mark_queue(meta): a queue exists when its meta hash does; the script that may create a
-- queue's first key writes schema_version there (if absent), the layout's version. Workers
-- refuse a queue whose version is not theirs (echomq.admin.queues.ensure_schema).
local SCHEMA_VERSION = 1
-- A queue marked here with nothing else in its meta (a new queue) also gets `logs` = 0: no
-- job of it has a log list (add_log sets 1), so its finishing scripts need not read every
-- finished job's logs key (include/finished.lua). Absent (a queue from before the field)
-- reads as 1. The operator's verbs (pause, resume, drain, obliterate, set_retention,
-- set_limits) never create a queue: each refuses a missing meta hash (EMQNOQUEUE).
local function mark_queue(meta)
  if redis.call('HSETNX', meta, 'schema_version', SCHEMA_VERSION) == 1
    and redis.call('HLEN', meta) == 1 then
    redis.call('HSET', meta, 'logs', '0')
  end
end
