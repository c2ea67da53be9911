--[[
  Append a line to a job's log list, keeping the last `keep` lines (by default the queue's
  max_log_lines, else its default: a memory guard); the list ends with its row.
  KEYS  1 row    HASH  the job
        2 logs   LIST  the job's log lines, append order
        3 meta   HASH  the queue's settings: max_log_lines; `logs` (0 -> 1: a job of the
                       queue has a log list)
  ARGV  1 line   2 keep (0 = the queue's max_log_lines)
  Returns  the number of lines kept | -1 no row (nothing written)
  Events   (none)
  Moves    (none)
  Bound    O(1) per line appended; the LTRIM is O(lines removed) (one per call once the
           list is at keep)
  A finished job's row has a TTL (its retention, include/finished.lua): a list that a
  line starts after that takes the row's remaining TTL, so logs never outlive their job.
]]
local row, logs, meta = KEYS[1], KEYS[2], KEYS[3]
local line, keep = ARGV[1], tonumber(ARGV[2])
-- @include retention
local ttl = redis.call('PTTL', row)
if ttl == -2 then return -1 end
local settings = redis.call('HMGET', meta, 'max_log_lines', 'logs')
if keep <= 0 then keep = tonumber(settings[1]) or RETENTION_DEFAULTS.max_log_lines end
local fresh = redis.call('EXISTS', logs) == 0
-- the queue's `logs` flag: 0 = no job of it has a log list (its finishing scripts then skip
-- the logs keys); from the first line on, 1
if settings[2] == '0' then redis.call('HSET', meta, 'logs', '1') end
local n = redis.call('RPUSH', logs, line)
if n > keep then
  redis.call('LTRIM', logs, -keep, -1)
  n = keep
end
if fresh and ttl > 0 then redis.call('PEXPIRE', logs, ttl) end
return n
