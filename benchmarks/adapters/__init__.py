"""The peers: other Python task queues run the same no-op workload as echomq.

Each peer has one adapter file here (``<name>.py``). An adapter runs *inside that peer's own
virtual environment* (``benchmarks/.peers/<name>``, made at run time from PyPI, ignored by
git), so it imports only the peer, redis-py and the standard library; never echomq.
:mod:`benchmarks.harness` drives it from the echomq side; ``python -m benchmarks peers``
runs them all in one rotation.
"""

from __future__ import annotations

import attrs

__all__ = ["NO_BULK", "PEERS", "Peer"]


@attrs.frozen
class Peer:
    """A peer: its name, what pip (or npm) installs, whose versions the table prints.

    ``kind`` is ``"python"`` (a venv under ``benchmarks/.peers/<name>``, adapter
    ``peer_<name>.py``) or ``"node"`` (``npm install`` into ``benchmarks/.peers/<name>``,
    adapter ``<name>.cjs`` in this folder). ``bulk`` says whether the peer has a bulk
    enqueue API (the ``bulk`` role is skipped for those without one).
    """

    name: str
    requirements: tuple[str, ...]
    version_of: tuple[str, ...]
    kind: str = "python"
    bulk: bool = False

    @property
    def module(self) -> str:
        """The adapter's module name (``peer_bullmq_py`` for ``bullmq-py``)."""
        return "peer_" + self.name.replace("-", "_")


PEERS: dict[str, Peer] = {
    p.name: p
    for p in (
        Peer("arq", ("arq", "redis"), ("arq", "redis")),
        # saq imports typing_extensions undeclared; with redis-py 8 (pool capped at 100 connections
        # by default) its worker at concurrency 100 fails with MaxConnectionsError: pin redis < 6
        Peer("saq", ("saq", "redis<6", "typing_extensions"), ("saq", "redis")),
        Peer("rq", ("rq", "redis"), ("rq", "redis"), bulk=True),
        Peer("celery", ("celery[redis]",), ("celery", "kombu", "redis")),
        Peer("taskiq", ("taskiq", "taskiq-redis", "redis"), ("taskiq", "taskiq-redis", "redis")),
        Peer("streaq", ("streaq", "redis"), ("streaq",), bulk=True),
        Peer("bullmq-py", ("bullmq", "redis"), ("bullmq", "redis"), bulk=True),
        # BullMQ itself, on Node (adapter: .cjs). ioredis is the version BullMQ's own tests
        # use (`npm view bullmq@6.7.0 devDependencies`: ioredis 5.11.1); move both together
        Peer(
            "bullmq-node",
            ("bullmq@6.7.0", "ioredis@5.11.1"),
            ("bullmq", "ioredis"),
            kind="node",
            bulk=True,
        ),
        Peer("dramatiq", ("dramatiq[redis]",), ("dramatiq", "redis")),
        # huey's 100 worker threads plus its scheduler exceed redis-py 8's pool cap of 100
        # connections (MaxConnectionsError lost one job of a 100,000 drain): pin redis < 6
        Peer("huey", ("huey", "redis<6"), ("huey", "redis")),
    )
}

# what the bulk column says for peers without a bulk enqueue API (looked up in their sources)
NO_BULK = {
    "arq": "no bulk API (one enqueue_job per job)",
    "saq": "no bulk API (Queue.map enqueues one by one and waits; Queue.batch only tracks)",
    "celery": "no bulk API (a group publishes one message per task)",
    "taskiq": "no bulk API (one kiq per task)",
    "dramatiq": "no bulk API (a group sends one message per actor call)",
    "huey": "no bulk API (task.map enqueues one by one)",
}
