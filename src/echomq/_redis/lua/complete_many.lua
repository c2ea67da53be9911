--[[
  Complete many held jobs in one call (a worker's completions of one scheduler tick):
  complete's checks and writes, job by job, each fenced by its own token.
  KEYS  1 active  ZSET  claimed ids
  ARGV  1 queue base   2 number of jobs n (1..100)   then n triples: id, token, result
  Returns  one code per job, in order: 1 completed | 2 already completed with this token
           (nothing changed) | -1 no row | -2 stale token | -3 not in active
  Errors   EMQARG   n is not 1..100, does not match the argument count, or an id repeats
           (nothing written; the verb refuses them first)
  Events   completed (per job completed)
  Moves    active -> completed; completed -> (none) (the retention, other rows);
           waiting -> pending (a flow parent: its last open child, docs/flows.md)
  Bound    O(n * log N); at most 100 jobs per call (validate.MAX_BATCH), plus the
           retention's cleanup: at most 100 expired index entries and 100 rows past the
           count cap (and their logs) per call, as for one complete
  Per job the checks run in complete's order (row, token, idempotent repeat, membership),
  every job is checked before the first write, and a job refused changes nothing: the
  others complete. The completed ones finish through include/finished.lua exactly as in
  complete (an entry each, `cancelled:<reason>` as cancelled); its per-call work (the
  settings read, the counters, the stream's guard, the index cleanup) is done once, and
  the row fields it reads come with the check's HMGET (one HMGET per job).
  A grouped job gives back its group's active slot (`leave_active`; docs/lanes.md); the
  ungrouped ones leave active in one ZREM, as before lanes.
]]
local MAX_JOBS = 100
local active, base = KEYS[1], ARGV[1]
local n = tonumber(ARGV[2])
-- @include time
-- @include score
-- @include wake
-- @include lanes
-- @include ready
-- @include leave_active
-- @include finished
if not n or n < 1 or n > MAX_JOBS or #ARGV ~= 2 + n * 3 then
  return redis.error_reply('EMQARG complete_many takes 1..' .. MAX_JOBS .. ' jobs of 3 arguments')
end
local seen = {}
for i = 0, n - 1 do
  local id = ARGV[3 + i * 3]
  if seen[id] then return redis.error_reply('EMQARG complete_many: job ' .. id .. ' repeats') end
  seen[id] = true
end

-- checks, in order per job: row, token, (idempotent repeat), membership; reads only
-- (membership of every id read at once: one ZMSCORE, not one ZSCORE per job)
local ids = {}
for i = 0, n - 1 do ids[i + 1] = ARGV[3 + i * 3] end
local held = redis.call('ZMSCORE', active, unpack(ids))
local codes, done, jobs = {}, {}, {}
local wanted = finish_fields('completed')  -- finish_read's fields, read in the same HMGET
table.insert(wanted, 1, 'group')
table.insert(wanted, 1, 'state')
table.insert(wanted, 1, 'attempts')
for i = 0, n - 1 do
  local j = 3 + i * 3
  local id, token = ARGV[j], ARGV[j + 1]
  local fields = redis.call('HMGET', base .. 'job:' .. id, unpack(wanted))
  local code = 1
  if not fields[1] then code = -1
  elseif fields[1] ~= token then code = -2
  elseif fields[2] == 'completed' then code = 2
  elseif not held[i + 1] then code = -3
  end
  codes[i + 1] = code
  if code == 1 then
    local result = ARGV[j + 2]
    local cancelled = string.sub(result, 1, 10) == 'cancelled:'
    done[#done + 1] = {id = id, result = result, cancelled = cancelled, group = fields[3]}
    if fields[3] then lanes_touch(base, fields[3]) end
    jobs[#jobs + 1] = {id, cancelled and 'cancelled' or 'completed', fields, 3}
  end
end
if #done == 0 then return codes end

local now = now_ms()
local fin = finish_read(base, 'completed', now, jobs)

local plain = {}  -- ungrouped jobs leave active in one ZREM
for _, job in ipairs(done) do
  if job.group then leave_active(base, active, job.id, job.group) else plain[#plain + 1] = job.id end
end
if #plain > 0 then redis.call('ZREM', active, unpack(plain)) end
for k, job in ipairs(done) do
  redis.call('HSET', base .. 'job:' .. job.id, 'state', 'completed', 'result', job.result,
    'finished_at', now)
  redis.call('PUBLISH', base .. 'events', '{"event":"completed","job":"' .. job.id .. '"}')
  if job.cancelled then
    finished(fin, k, {reason = string.sub(job.result, 11)})
  else
    finished(fin, k, {result = job.result})
  end
end
return codes
