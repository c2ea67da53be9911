--[[
  Complete many held jobs in one call (a worker's completions of one scheduler tick):
  complete's checks and writes, job by job, each fenced by its own token.
  KEYS  1 active  ZSET  claimed ids
  ARGV  1 queue base   2 number of jobs n (1..MAX_HELD)   then n triples: id, token, result
  Returns  one code per job, in order: 1 completed | 2 already finished with this token
           (nothing changed) | -1 no row | -2 stale token | -3 not in active
  Errors   EMQARG   n is not 1..MAX_HELD, does not match the argument count, or an id repeats
           (nothing written; the verb refuses them first)
  Events   completed | cancelled (per job finished; only while the channel has a
           listener: include/events.lua)
  Moves    active -> completed | cancelled; completed | cancelled -> (none) (the
           retention, other rows);
           waiting -> pending (a flow parent: its last open child, docs/flows.md)
  Bound    O(n * log N); at most MAX_HELD jobs per call (include/caps.lua), plus the
           retention's cleanup: at most 100 expired index entries and 100 rows past the
           count cap (and their logs) per call, as for one complete
  Per job the checks run in complete's order (row, token, idempotent repeat, membership),
  every job is checked before the first write, and a job refused changes nothing: the
  others complete. The completed ones finish through include/finished.lua exactly as in
  complete (an entry each, `cancelled:<reason>` as state `cancelled`); its per-call work
  (the settings read, the counters, the stream's guard, the index cleanup) is done once
  per kind of outcome (one finish_read for the completed jobs, one for the cancelled
  ones, when the call has any), and the row fields it reads come with the check's HMGET
  (one HMGET per job).
  A grouped job gives back its group's active slot (`leave_active`; docs/lanes.md); the
  ungrouped ones leave active in one ZREM, as before lanes.
]]
-- @include caps
-- @include time
-- @include events
-- @include lanes
-- @include leave_active
-- @include finished
-- @include finish_row
local active, base = KEYS[1], ARGV[1]
local n = tonumber(ARGV[2])
if not n or n < 1 or n > MAX_HELD or #ARGV ~= 2 + n * 3 then
  return redis.error_reply('EMQARG complete_many takes 1..' .. MAX_HELD .. ' jobs of 3 arguments')
end
local ids, seen = {}, {}
for i = 0, n - 1 do
  local id = ARGV[3 + i * 3]
  if seen[id] then return redis.error_reply('EMQARG complete_many: job ' .. id .. ' repeats') end
  seen[id] = true
  ids[i + 1] = id
end

-- checks, in order per job: row, token, (idempotent repeat), membership; reads only
-- (membership of every id read at once: one ZMSCORE, not one ZSCORE per job)
local held = redis.call('ZMSCORE', active, unpack(ids))
local codes, jobs = {}, {}  -- jobs: finish_read's entries, and each one's result
local done, stopped = {}, {}  -- jobs' entries by outcome: completed, cancelled
-- the row's state and group, then finish_read's fields (the token among them)
local wanted = finish_fields('completed')
table.insert(wanted, 1, 'group')
table.insert(wanted, 1, 'state')
wanted[#wanted + 1] = 'priority'  -- (a priority of 0 goes at the finish: finish_row)
local prio = #wanted
local at = nil  -- where the token is
for k, name in ipairs(wanted) do
  if name == 'token' and not at then at = k end
end
local grouped = false
for i = 0, n - 1 do
  local j = 3 + i * 3
  local id, token = ARGV[j], ARGV[j + 1]
  local row = base .. 'job:' .. id
  local fields = redis.call('HMGET', row, unpack(wanted))
  local held_token = fields[at]
  local code = 1
  if not held_token then code = -1
  elseif held_token ~= token then code = -2
  elseif fields[1] == 'completed' or fields[1] == 'cancelled' then code = 2
  elseif not held[i + 1] then code = -3
  end
  codes[i + 1] = code
  if code == 1 then
    local result = ARGV[j + 2]
    local state = 'completed'  -- (a first byte other than 'c' makes no substring)
    if string.byte(result, 1) == 99 and string.sub(result, 1, 10) == 'cancelled:' then
      state = 'cancelled'
    end
    if fields[2] then
      lanes_touch(base, fields[2])
      grouped = true
    end
    local job = {id, state, fields, 2, result, row}
    jobs[#jobs + 1] = job
    if state == 'completed' then done[#done + 1] = job else stopped[#stopped + 1] = job end
  end
end
if #jobs == 0 then return codes end

local now = now_ms()
local fin = #done > 0 and finish_read(base, 'completed', now, done)
local fin_x = #stopped > 0
  and finish_read(base, 'cancelled', now, stopped, fin and fin.parents or nil)

local plain = ids  -- the jobs that leave active in one ZREM: all of them, when all
if grouped or #jobs < n then  -- complete and none is grouped (a grouped one gives back its slot)
  plain = {}
  for _, job in ipairs(jobs) do
    local group = job[3][2]
    if group then leave_active(base, active, job[1], group) else plain[#plain + 1] = job[1] end
  end
end
if #plain > 0 then redis.call('ZREM', active, unpack(plain)) end
local channel = base .. 'events'
local loud = heard(channel, #jobs)  -- (include/events.lua)
local detail = {}  -- finished's detail, one table rewritten job by job
for k, job in ipairs(done) do
  local id, result = job[1], job[5]
  finish_row(job[6], fin.keep_payload ~= 0, job[3][prio] == '0',
    {'state', 'completed', 'result', result, 'finished_at', fin.now_arg})
  if loud then redis.call('PUBLISH', channel, '{"event":"completed","job":"' .. id .. '"}') end
  detail.result = result
  finished(fin, k, detail)
end
detail.result = nil
for k, job in ipairs(stopped) do
  local id, reason = job[1], string.sub(job[5], 11)
  finish_row(job[6], fin_x.keep_payload ~= 0, job[3][prio] == '0',
    {'state', 'cancelled', 'cancel_reason', reason, 'finished_at', fin_x.now_arg})
  if loud then redis.call('PUBLISH', channel, '{"event":"cancelled","job":"' .. id .. '"}') end
  detail.reason = reason
  finished(fin_x, k, detail)
end
return codes
