"""The wire: RESP connections to Redis (single server and cluster), pub/sub, dialing and the
cluster's topology, plus the drivers that put redis.asyncio and redis-py behind the same
connection interface. Nothing here knows about jobs, keys or Lua."""
