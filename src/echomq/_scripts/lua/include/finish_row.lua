-- finish_row(row, keep_payload, zero_priority, outcome): the row of a job that completed
-- or ended cancelled gets its outcome (`outcome`: field, value pairs: state, result |
-- cancel_reason, finished_at) and first loses what only the running job needs: the
-- lease's `lease_epoch` and `worker`, the `headers` claim hands over, and a `priority` of
-- 0 when `zero_priority` (absent reads 0); so the row never holds more fields than it
-- held while it ran (docs/results.md, "The finished row"). keep_payload false (the
-- queue's retention setting `keep_payload` 0): the row is written anew without its
-- `payload` either, a new hash, which Redis keeps as a compact listpack when its values
-- are small (a hash table never turns back into one). A dead row is not given here: it
-- is kept whole (reprocess_job runs it again).
local FINISH_ROW_CHUNK = 256  -- fields per HSET of a row written anew (docs/lua.md, rule 4)
local function finish_row(row, keep_payload, zero_priority, outcome)
  if keep_payload then
    if zero_priority then
      redis.call('HDEL', row, 'lease_epoch', 'worker', 'headers', 'priority')
    else
      redis.call('HDEL', row, 'lease_epoch', 'worker', 'headers')
    end
    redis.call('HSET', row, unpack(outcome))
    return
  end
  local drop = {payload = true, lease_epoch = true, worker = true, headers = true,
    priority = zero_priority}
  for i = 1, #outcome, 2 do drop[outcome[i]] = true end
  local all = redis.call('HGETALL', row)
  local kept, n = {}, 0
  for i = 1, #all, 2 do
    if not drop[all[i]] then kept[n + 1], kept[n + 2], n = all[i], all[i + 1], n + 2 end
  end
  redis.call('DEL', row)
  redis.call('HSET', row, unpack(outcome))
  for i = 1, n, 2 * FINISH_ROW_CHUNK do
    redis.call('HSET', row, unpack(kept, i, math.min(n, i + 2 * FINISH_ROW_CHUNK - 1)))
  end
end
