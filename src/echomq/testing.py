"""Private redis-servers for tests and demos: one server, or a Redis Cluster of them.

``RedisServer`` runs one ``redis-server`` child process on a free loopback port;
``RedisCluster`` runs several in cluster mode (3 masters, optionally a replica each) with
every slot assigned, plus the fault helpers tests need (kill or restart a node, fail a
master over to its replica, migrate a slot). Persistence is off unless asked for.
No test depends on a system-wide Redis. ``PostgresServer`` is the same for PostgreSQL: a
private ``initdb`` cluster on a free loopback port, for the archive's tests and benchmarks.
The implementations live in ``echomq._servers`` (production code uses those, never this
module).
"""

from __future__ import annotations

from ._servers.cluster import (
    ClusterNode,
    RedisCluster,
    SlotMigration,
    open_redis_cluster,
)
from ._servers.postgres import PostgresServer, PostgresServerError, find_postgres_bin
from ._servers.single import (
    RedisServer,
    RedisServerError,
    find_redis_server,
    free_port,
    open_redis_server,
    serve_redis_server,
)

__all__ = [
    "RedisServer",
    "RedisServerError",
    "find_redis_server",
    "free_port",
    "open_redis_server",
    "serve_redis_server",
    "RedisCluster",
    "ClusterNode",
    "SlotMigration",
    "open_redis_cluster",
    "PostgresServer",
    "PostgresServerError",
    "find_postgres_bin",
]
