--[[
  Write a job's progress field and publish a progress event.
  KEYS  1 row   HASH  the job
  ARGV  1 progress   2 id   3 queue base (emq:{q}:)
  Returns  1 | -1 no row (nothing written, nothing published)
  Events   progress {"event":"progress","job":id,"progress":value}
  Moves    (none)
  Bound    O(1)
]]
local row = KEYS[1]
local progress, id, base = ARGV[1], ARGV[2], ARGV[3]
if redis.call('EXISTS', row) == 0 then return -1 end
redis.call('HSET', row, 'progress', progress)
redis.call('PUBLISH', base .. 'events',
  cjson.encode({event = 'progress', job = id, progress = progress}))
return 1
