-- mark_queue(meta): a queue exists when its meta hash does; the script that may create a
-- queue's first key writes schema_version there (if absent), the layout's version. Workers
-- refuse a queue whose version is not theirs (echomq._verbs.admin.ensure_schema).
local SCHEMA_VERSION = 1
local function mark_queue(meta)
  redis.call('HSETNX', meta, 'schema_version', SCHEMA_VERSION)
end
