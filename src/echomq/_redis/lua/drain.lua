--[[
  Drain a queue's backlog: delete every pending job (and, when asked, every scheduled one)
  with its row, logs and lock, then the set. Active jobs and recurring registrations are
  untouched. Not bounded: a drain is one call.
  KEYS  1 pending    ZSET  ready ids
        2 schedule   ZSET  delayed ids
  ARGV  1 queue base (emq:{q}:)   2 '1' = drain the schedule set too
  Returns  the number of jobs deleted
  Events   drained {"event":"drained","job":"","count":n} when n > 0
  Moves    pending | scheduled -> (none)
]]
local pending, schedule = KEYS[1], KEYS[2]
local base, with_schedule = ARGV[1], ARGV[2] == '1'

local function wipe(set)
  local ids = redis.call('ZRANGE', set, 0, -1)
  for _, id in ipairs(ids) do
    local jk = base .. 'job:' .. id
    redis.call('DEL', jk, jk .. ':logs', jk .. ':lock')
  end
  redis.call('DEL', set)
  return #ids
end

local n = wipe(pending)
if with_schedule then n = n + wipe(schedule) end
if n > 0 then
  redis.call('PUBLISH', base .. 'events', cjson.encode({event = 'drained', job = '', count = n}))
end
return n
