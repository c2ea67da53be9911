"""Tasks for worker subprocesses (``python -m echomq worker _proc_tasks:queue``).

The queue name, URL and lease come from the environment the test sets.
"""

from __future__ import annotations

import os

import trio

import echomq

queue = echomq.Queue(os.environ["EMQ_TEST_QUEUE"])


@queue.task(name="sleepy", lease=float(os.environ.get("EMQ_TEST_LEASE", "30")))
async def sleepy(seconds: float) -> str:
    await trio.sleep(seconds)
    return "slept"
