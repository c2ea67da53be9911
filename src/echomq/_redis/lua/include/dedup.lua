-- held_dedup(base, row, id): the dedup key (emq:{q}:dedup:<key>) that the job `id` holds,
-- named in its row's `dedup` field and still holding this id; nil when none. Reads only:
-- a script that removes the job deletes the key after its checks (docs/repeat.md).
local function held_dedup(base, row, id)
  local name = redis.call('HGET', row, 'dedup')
  if not name then return nil end
  local key = base .. 'dedup:' .. name
  if redis.call('GET', key) == id then return key end
  return nil
end
