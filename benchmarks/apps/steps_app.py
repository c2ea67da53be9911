"""The worker app of ``python -m benchmarks steps``: ``stepped(n, seconds, record)`` runs
``n`` durable steps of a no-op (``record``: each step logs ``effect <i> <token>`` to the
job's log list, the evidence the chaos part counts; ``seconds``: each step sleeps first).

The queue's name comes from ``$EMQ_BENCH_QUEUE``, the lease (s) from ``$EMQ_BENCH_LEASE``;
workers are started as ``echomq worker benchmarks.apps.steps_app:queue`` from the
repository root. The producer registers a same-named twin (:func:`register`).
"""

from __future__ import annotations

import os
from typing import Any

import trio

import echomq

queue = echomq.Queue(os.environ.get("EMQ_BENCH_QUEUE", "steps"))
LEASE = float(os.environ.get("EMQ_BENCH_LEASE", "5"))


def register(q: echomq.Queue, lease: float = LEASE) -> Any:
    """The task, on ``q`` (the worker's module-level queue, or a producer's twin)."""

    async def nothing() -> None:
        return None

    @q.task(name="stepped", lease=lease, max_attempts=1)
    async def stepped(job: echomq.Job, n: int, seconds: float, record: bool) -> int:
        for i in range(n):
            if record:

                async def effect(i: int = i) -> int:
                    if seconds:
                        await trio.sleep(seconds)
                    await job.log(f"effect {i} {job.token}")
                    return i

                await job.step(f"s{i}", effect)
            else:
                await job.step(f"s{i}", nothing)
        return n

    return stepped


stepped = register(queue)
