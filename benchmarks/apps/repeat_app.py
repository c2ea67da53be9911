"""The worker app of ``python -m benchmarks repeat_soak``: one no-op task for the runs.

The queue's name comes from ``$EMQ_BENCH_QUEUE`` (the soak script sets it); the workers
are started as ``echomq worker benchmarks.apps.repeat_app:queue`` from the repository root.
"""

from __future__ import annotations

import os

import trio

import echomq

queue = echomq.Queue(os.environ.get("EMQ_BENCH_QUEUE", "repeat-soak"))


@queue.task(name="soak.run", lease=2.0)
async def run(key: str) -> None:
    """A repeatable's run: 0.2 s of waiting, so a worker killed holds some runs mid-job."""
    await trio.sleep(0.2)
