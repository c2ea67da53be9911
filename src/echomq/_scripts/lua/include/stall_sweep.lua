-- stall_sweep(base, active, pending, limit, counting, dies_at) -> {recovered ids, dead ids}:
-- the expired-lease sweep that reap and stalled_check share (docs/runtime.md). Per expired
-- lease (at most limit, oldest deadline first): leave active; a lease stamped before the
-- server's last restart (lease_epoch missing or another run_id) is recovered without
-- counting; otherwise, when `counting`, the row's `stalled` count grows by one and the job
-- dies (last_error 'stalled', through `finished`) once that count reaches `dies_at`, else it
-- goes back to pending (its lane when grouped). An id with no row leaves active and is
-- listed nowhere. Every read comes before the first write (docs/lua.md, rule 1).
-- @include time
-- @include score
-- @include run_id
-- @include lanes
-- @include ready
-- @include leave_active
-- @include finished
local function stall_sweep(base, active, pending, limit, counting, dies_at)
  local now = now_ms()
  local expired = redis.call('ZRANGEBYSCORE', active, '-inf', now, 'LIMIT', 0, limit)
  if #expired == 0 then return {{}, {}} end
  local run_id = server_run_id()
  -- reads first: each row's epoch, stall count and priority; then who dies, and what
  -- finishing them reads
  local rows, plan, dying = {}, {}, {}
  for i, id in ipairs(expired) do
    local f = redis.call('HMGET', base .. 'job:' .. id, 'state', 'lease_epoch', 'stalled',
      'priority', 'group')
    rows[i] = f
    if f[5] then lanes_touch(base, f[5]) end
    if f[1] and f[2] == run_id and counting then
      local stalled = tonumber(f[3] or '0') + 1
      plan[i] = {stalled = stalled, dies = stalled >= dies_at}
      if plan[i].dies then
        dying[#dying + 1] = {id, 'dead'}
        plan[i].n = #dying
      end
    end
  end
  local fin = #dying > 0 and finish_read(base, 'dead', now, dying)
  local recovered, died = {}, {}
  local channel = base .. 'events'
  for i, id in ipairs(expired) do
    local f, p = rows[i], plan[i]
    leave_active(base, active, id, f[5])
    if f[1] then
      local jk = base .. 'job:' .. id
      if p then redis.call('HSET', jk, 'stalled', p.stalled) end
      if p and p.dies then
        redis.call('HSET', jk, 'state', 'dead', 'last_error', 'stalled', 'finished_at', now)
        redis.call('PUBLISH', channel, '{"event":"dead","job":"' .. id .. '","error":"stalled"}')
        finished(fin, p.n, {error = 'stalled'})
        died[#died + 1] = id
      else
        redis.call('HSET', jk, 'state', 'pending')
        ready(base, pending, id, f[5], band_score(f[4] or '0', 0))
        redis.call('PUBLISH', channel, '{"event":"recovered","job":"' .. id .. '"}')
        recovered[#recovered + 1] = id
      end
    end
  end
  return {recovered, died}
end
