"""The worker app of ``python -m benchmarks lanes`` (the rate section): a queue named by
``$EMQ_BENCH_QUEUE`` with one no-op task, served by ``echomq worker
benchmarks.apps.lanes_app:queue``."""

from __future__ import annotations

import os

import echomq

queue = echomq.Queue(os.environ.get("EMQ_BENCH_QUEUE", "bench"))


@queue.task(name="noop")
async def noop(*args: object) -> None:
    return None
