--[[
  Append a line to a job's log list; with keep > 0, keep only the last `keep` lines.
  KEYS  1 row    HASH  the job
        2 logs   LIST  the job's log lines, append order
  ARGV  1 line   2 keep (0 = keep all)
  Returns  the number of lines kept | -1 no row (nothing written)
  Events   (none)
  Moves    (none)
  Bound    O(1) per line appended; with keep, the LTRIM is O(lines removed) (one per call
           once the list is at keep)
]]
local row, logs = KEYS[1], KEYS[2]
local line, keep = ARGV[1], tonumber(ARGV[2])
if redis.call('EXISTS', row) == 0 then return -1 end
local n = redis.call('RPUSH', logs, line)
if keep > 0 and n > keep then
  redis.call('LTRIM', logs, -keep, -1)
  n = keep
end
return n
