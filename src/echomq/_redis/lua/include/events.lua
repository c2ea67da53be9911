-- Whether a queue's events channel has a listener now: a subscriber of the channel on this
-- server, or any pattern subscriber (on a cluster, the sharded count: sharded_source).
-- Pub/sub keeps nothing, so an event published with no listener is one nobody can see:
-- the hot scripts ask once per call and publish their per-job events only when one does
-- (docs/lua.md, "Decisions").
local function heard(channel)
  if redis.call('PUBSUB', 'NUMSUB', channel)[2] > 0 then return true end
  return redis.call('PUBSUB', 'NUMPAT') > 0
end
