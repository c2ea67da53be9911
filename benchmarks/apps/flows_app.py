"""The worker app of ``python -m benchmarks flows``: a leaf, a chord callback, a summing
parent; each counts its executions in ``emq-bench:{<queue>}:runs`` (a hash: tag -> runs).

The queue's name comes from ``$EMQ_BENCH_QUEUE`` and the tasks' lease (seconds) from
``$EMQ_BENCH_LEASE``; workers are started as ``echomq worker benchmarks.apps.flows_app:queue``
from the repository root. The producer registers same-named twins (:func:`register`).
"""

from __future__ import annotations

import os
from typing import Any

import trio

import echomq

queue = echomq.Queue(os.environ.get("EMQ_BENCH_QUEUE", "flows"))
LEASE = float(os.environ.get("EMQ_BENCH_LEASE", "5"))


def runs_key(name: str) -> str:
    """The executions counter of queue ``name`` (its slot: the queue's hash tag)."""
    return f"emq-bench:{{{name}}}:runs"


def register(q: echomq.Queue, lease: float = LEASE) -> dict[str, Any]:
    """The tasks, on ``q`` (the worker's module-level queue, or a producer's twin)."""

    async def count(tag: str) -> None:
        await q.connection.execute("HINCRBY", runs_key(q.name), tag, 1)

    @q.task(name="leaf", lease=lease)
    async def leaf(n: int, seconds: float = 0.0) -> int:
        """Counts itself first, so a run killed mid-sleep is counted (a re-run shows)."""
        await count(f"leaf:{n}")
        if seconds:
            await trio.sleep(seconds)
        return n

    @q.task(name="total", lease=lease)
    async def total(values: list[int], tag: str = "total") -> int:
        await count(tag)
        return sum(values)

    @q.task(name="callback", lease=lease)
    async def callback(values: list[int]) -> dict[str, int]:
        """The chord's callback: how many results it got, their sum, when it started."""
        await count("callback")
        seconds, micros = await q.connection.execute("TIME")
        started = int(seconds) * 1000 + int(micros) // 1000
        return {"n": len(values), "sum": sum(values), "started_ms": started}

    return {"leaf": leaf, "total": total, "callback": callback}


tasks = register(queue)
