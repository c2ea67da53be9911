--[[
  Set (or reset to the defaults) a queue's retention settings in its meta hash.
  KEYS  1 meta   HASH  the queue's settings (schema_version set if absent)
  ARGV  pairs of: name, value ('' = back to the default: the field is deleted); a name is
        a key of RETENTION_DEFAULTS (include/retention.lua: times in ms, counts)
  Returns  1
  Errors   EMQARG   an unknown name, a value that is not a whole number >= 0, or more than
                    one pair per setting (nothing written)
           EMQNOQUEUE  the queue has no meta hash: it does not exist (nothing written)
  Events   (none)
  Moves    (none)
  Bound    O(1): at most one field per setting
  The finishing scripts read these at every call (include/finished.lua), add_log reads
  max_log_lines: a change applies to what finishes from then on. Rows already finished keep
  the TTL they were given.
]]
-- @include retention
-- @include schema
local meta = KEYS[1]
local known = 0  -- the settings (include/retention.lua)
for _ in pairs(RETENTION_DEFAULTS) do known = known + 1 end
if #ARGV % 2 ~= 0 or #ARGV > 2 * known then
  return redis.error_reply('EMQARG set_retention takes at most ' .. known .. ' name/value pairs')
end
for i = 1, #ARGV, 2 do
  local value = ARGV[i + 1]
  if not RETENTION_DEFAULTS[ARGV[i]] or (value ~= '' and not string.match(value, '^%d+$')) then
    return redis.error_reply('EMQARG not a retention setting: ' .. ARGV[i])
  end
end
if redis.call('EXISTS', meta) == 0 then  -- no queue: a typo creates none (nothing written)
  return redis.error_reply('EMQNOQUEUE ' .. string.match(meta, '{(.-)}'))
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
