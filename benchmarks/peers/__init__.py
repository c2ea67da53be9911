"""The peers: other Python task queues run the same no-op workload as echomq.

Each peer has one adapter file here (``<name>.py``). An adapter runs *inside that peer's own
virtual environment* (``benchmarks/.peers/<name>``, made at run time from PyPI, ignored by
git), so it imports only the peer, redis-py and the standard library; never echomq.
:mod:`benchmarks.peers.harness` drives it from the echomq side.
"""

from __future__ import annotations

import attrs

__all__ = ["PEERS", "Peer"]


@attrs.frozen
class Peer:
    """A peer: its adapter module name, what pip installs, whose versions the table prints."""

    name: str
    requirements: tuple[str, ...]
    version_of: tuple[str, ...]


PEERS: dict[str, Peer] = {
    p.name: p
    for p in (
        Peer("arq", ("arq", "redis"), ("arq", "redis")),
        # saq imports typing_extensions undeclared; with redis-py 8 (pool capped at 100 connections
        # by default) its worker at concurrency 100 fails with MaxConnectionsError: pin redis < 6
        Peer("saq", ("saq", "redis<6", "typing_extensions"), ("saq", "redis")),
        Peer("rq", ("rq", "redis"), ("rq", "redis")),
        Peer("celery", ("celery[redis]",), ("celery", "kombu", "redis")),
        Peer("taskiq", ("taskiq", "taskiq-redis", "redis"), ("taskiq", "taskiq-redis", "redis")),
        Peer("streaq", ("streaq", "redis"), ("streaq",)),
        Peer("bullmq", ("bullmq", "redis"), ("bullmq", "redis")),
        Peer("dramatiq", ("dramatiq[redis]",), ("dramatiq", "redis")),
        Peer("huey", ("huey", "redis"), ("huey", "redis")),
    )
}
