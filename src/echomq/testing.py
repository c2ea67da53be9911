"""Private redis-servers and the fault kit, for tests (users' own and ours) and demos.

Servers: ``RedisServer`` runs one ``redis-server`` child process on a free loopback port;
``RedisCluster`` runs several in cluster mode (3 masters, optionally a replica each) with
every slot assigned, plus the fault helpers cluster tests need (kill or restart a node,
fail a master over to its replica, migrate a slot). Persistence is off unless asked for.
No test depends on a system-wide Redis. ``PostgresServer`` is the same for PostgreSQL: a
private ``initdb`` cluster on a free loopback port, for the archive's tests and benchmarks.

The fault kit (docs/testing.md): ``open_worker_process`` (a worker in a child process,
observed serving), ``kill_worker``, ``wait_running``, ``freeze_renewal`` /
``thaw_renewal``, ``restart_redis`` / ``drop_redis`` / ``freeze_redis``, and
``FaultProxy`` (``open_fault_proxy``) that cuts, refuses or delays connections.

The implementations live in ``echomq._testkit`` and ``echomq._testkit`` (production code
never imports this module).
"""

from __future__ import annotations

from ._testkit.fault_proxy import FaultProxy, open_fault_proxy, serve_fault_proxy
from ._testkit.lease_freeze import freeze_renewal, thaw_renewal
from ._testkit.postgres_server import PostgresServer, PostgresServerError, find_postgres_bin
from ._testkit.redis_cluster import (
    ClusterNode,
    RedisCluster,
    SlotMigration,
    open_redis_cluster,
)
from ._testkit.redis_server import (
    RedisServer,
    RedisServerError,
    find_redis_server,
    free_port,
    open_redis_server,
    serve_redis_server,
)
from ._testkit.server_faults import drop_redis, freeze_redis, restart_redis
from ._testkit.waiting import wait_running
from ._testkit.worker_process import (
    WorkerProcess,
    WorkerProcessError,
    kill_worker,
    open_worker_process,
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
    # the fault kit
    "WorkerProcess",
    "WorkerProcessError",
    "open_worker_process",
    "kill_worker",
    "wait_running",
    "freeze_renewal",
    "thaw_renewal",
    "restart_redis",
    "drop_redis",
    "freeze_redis",
    "FaultProxy",
    "open_fault_proxy",
    "serve_fault_proxy",
]
