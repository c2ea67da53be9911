--[[
  Set or clear limits at run time (docs/lanes.md): the queue's concurrency and rate limit,
  the default concurrency and rate limit of every group, or one group's own.
  KEYS  1 meta  HASH  the queue's limits (`concurrency`, `rate_max`, `rate_ms`) and the
                      groups' defaults
                      (`group_concurrency`, `group_rate_max`, `group_rate_ms`); a group's
                      own are in `gstate` (`<group>:limit`, `<group>:rate` =
                      `<max>:<ms>`)
  ARGV  1 queue base (emq:{q}:)   2 target: '' = the queue, '*' = every group's default,
        else a group's name   3 concurrency ('' = unchanged, 0 = clear, n)
        4 rate max ('' = unchanged, 0 = clear, n)   5 rate period ms (with a rate max)
        6 the rate's kind (with a rate max): 'fixed' | 'sliding' (meta `rate_kind`,
        `group_rate_kind`, absent = fixed; a group's own: `<max>:<ms>:sliding`)
  Returns  1
  Errors   EMQNOQUEUE  the queue has no meta hash: it does not exist (nothing written)
  Events   (none)
  Moves    (none)
  Bound    O(log N)
  A group's own change takes effect at once: it leaves the ring when at (or over) its new
  limit, and joins it (with a wake token) when it may start a job; its rate window is
  looked at again by the next claim. A default's change reaches the groups already out of
  the ring through `lanes_rejoin` (the verb pages it), or at their next finished job. A
  lowered limit never stops running jobs: the group claims none until under it.
]]
local meta = KEYS[1]
local base, target = ARGV[1], ARGV[2]
local concurrency, rate_max, rate_ms, kind = ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local sliding = kind == 'sliding'
-- @include wake
-- @include lanes
if redis.call('EXISTS', meta) == 0 then  -- no queue: a typo creates none (nothing written)
  return redis.error_reply('EMQNOQUEUE ' .. string.match(meta, '{(.-)}'))
end
if target == '' or target == '*' then
  local names = {'group_concurrency', 'group_rate_max', 'group_rate_ms', 'group_rate_kind'}
  if target == '' then names = {'concurrency', 'rate_max', 'rate_ms', 'rate_kind'} end
  if concurrency ~= '' then
    if tonumber(concurrency) > 0 then
      redis.call('HSET', meta, names[1], concurrency)
    else
      redis.call('HDEL', meta, names[1])
    end
  end
  if rate_max ~= '' then
    if tonumber(rate_max) > 0 then
      redis.call('HSET', meta, names[2], rate_max, names[3], rate_ms)
      if sliding then redis.call('HSET', meta, names[4], 'sliding')
      else redis.call('HDEL', meta, names[4]) end
    else
      redis.call('HDEL', meta, names[2], names[3], names[4])
    end
  end
else
  lanes_touch(base, target)
  local own = base .. 'gstate'
  if concurrency ~= '' then
    if tonumber(concurrency) > 0 then
      redis.call('HSET', own, target .. ':limit', concurrency)
    else
      redis.call('HDEL', own, target .. ':limit')
    end
  end
  if rate_max ~= '' then
    if tonumber(rate_max) > 0 then
      redis.call('HSET', own, target .. ':rate',
        rate_max .. ':' .. rate_ms .. (sliding and ':sliding' or ''))
    else
      redis.call('HDEL', own, target .. ':rate')
    end
  end
end

if target == '' then
  push_wake(base .. 'wake', 1)
elseif target ~= '*' then
  if rate_max ~= '' then redis.call('ZREM', base .. 'glimited', target) end
  local active, limit = group_slots(base, target)
  if limit and active >= limit then
    redis.call('ZREM', base .. 'gring', target)
  elseif lane_join(base, target) then
    push_wake(base .. 'wake', 1)
  end
end
return 1
