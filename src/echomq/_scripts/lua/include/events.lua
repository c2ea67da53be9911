-- Whether a queue's events channel has a listener now: a subscriber of the channel on this
-- server, or any pattern subscriber (on a cluster, the sharded count: sharded_source).
-- Pub/sub keeps nothing, so an event published with no listener is one nobody can see:
-- the hot scripts ask once per call and publish their per-job events only when one does
-- (docs/lua.md, "Decisions"). Asking costs two commands: a call with fewer than
-- EVENTS_ASK_FROM events publishes them without asking.
local EVENTS_ASK_FROM = 3
local function heard(channel, events)
  if events < EVENTS_ASK_FROM then return events > 0 end
  if redis.call('PUBSUB', 'NUMSUB', channel)[2] > 0 then return true end
  return redis.call('PUBSUB', 'NUMPAT') > 0
end
