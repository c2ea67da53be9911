"""The recovery guard: one worker sweeps a queue per interval.

``take_sweep_guard`` is ``SET sweep_guard owner NX PX interval``: the first worker to ask
in an interval wins it and runs the reap (or the stalled sweep); the others skip that
tick. The key expires by itself, so a worker that dies holding it blocks nobody for
longer than one interval.
"""

from __future__ import annotations

from .._redis import validate as v
from .._redis.keyspace import Keyspace
from .._redis.scripts import Executor

__all__ = ["take_sweep_guard"]


async def take_sweep_guard(conn: Executor, queue: str, owner: str, ttl_ms: int) -> bool:
    """Try to take the queue's sweep guard for ``ttl_ms``; True when this caller won it.

    Raises:
        InvalidKey, InvalidArgument: before any I/O.
    """
    key = Keyspace(queue).sweep_guard
    v.positive_int("ttl_ms", ttl_ms)
    v.text_arg("owner", owner)
    reply = await conn.execute("SET", key, owner, "NX", "PX", ttl_ms)
    return reply is not None
