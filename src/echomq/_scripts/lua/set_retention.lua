--[[
  Set (or reset to the defaults) a queue's retention settings in its meta hash.
  KEYS  1 meta   HASH  the queue's settings (schema_version set if absent: the queue exists)
  ARGV  pairs of: name, value ('' = back to the default: the field is deleted); names are
        keep_result, keep_dead, completions_keep (ms), completions_max, max_completed,
        max_dead, max_log_lines (counts)
  Returns  1
  Errors   EMQARG   an unknown name, a value that is not a whole number >= 0, or more than
                    the seven settings (nothing written)
  Events   (none)
  Moves    (none)
  Bound    O(1): at most 7 fields
  The finishing scripts read these at every call (include/finished.lua), add_log reads
  max_log_lines: a change applies to what finishes from then on. Rows already finished keep
  the TTL they were given.
]]
-- @include schema
local meta = KEYS[1]
local KNOWN = {keep_result = true, keep_dead = true, completions_keep = true,
  completions_max = true, max_completed = true, max_dead = true, max_log_lines = true}
if #ARGV % 2 ~= 0 or #ARGV > 14 then
  return redis.error_reply('EMQARG set_retention takes at most 7 name/value pairs')
end
for i = 1, #ARGV, 2 do
  local value = ARGV[i + 1]
  if not KNOWN[ARGV[i]] or (value ~= '' and not string.match(value, '^%d+$')) then
    return redis.error_reply('EMQARG not a retention setting: ' .. ARGV[i])
  end
end
mark_queue(meta)
for i = 1, #ARGV, 2 do
  if ARGV[i + 1] == '' then
    redis.call('HDEL', meta, ARGV[i])
  else
    redis.call('HSET', meta, ARGV[i], ARGV[i + 1])
  end
end
return 1
