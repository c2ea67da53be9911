--[[
  Read a job's log lines (append order); a read only.
  KEYS  1 row    HASH  the job
        2 logs   LIST  the job's log lines
  ARGV  (none)
  Returns  {lines...} (empty when none) | -1 no row
  Events   (none)
  Moves    (none)
  Bound    O(lines in the job's log): the whole list is read (add_log's keep bounds it)
]]
local row, logs = KEYS[1], KEYS[2]
if redis.call('EXISTS', row) == 0 then return -1 end
return redis.call('LRANGE', logs, 0, -1)
