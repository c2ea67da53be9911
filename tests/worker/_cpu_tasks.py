"""Module-level tasks for the process-pool test (a spawned child imports this module)."""

from __future__ import annotations

import os

import echomq

queue = echomq.Queue(os.environ.get("EMQ_TEST_QUEUE", "cpu-tasks"))


@queue.task(name="cpu.sum_squares", process=True)
def sum_squares(n: int) -> dict[str, int]:
    return {"sum": sum(i * i for i in range(n)), "pid": os.getpid()}
