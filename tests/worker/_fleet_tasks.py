"""Tasks for ``echomq worker _fleet_tasks:queue --processes N`` (tests/worker/test_fleet.py).

The queue name, the lease and the marks folder come from the environment the test sets.
"""

from __future__ import annotations

import os
from pathlib import Path

import trio

import echomq

queue = echomq.Queue(os.environ["EMQ_TEST_QUEUE"])
MARKS = Path(os.environ["EMQ_TEST_MARKS"])
LEASE = float(os.environ.get("EMQ_TEST_LEASE", "30"))


@queue.task(name="once_slow", lease=LEASE)
async def once_slow(key: str) -> int:
    """The first run marks ``key`` with its pid and hangs; a later run answers its pid."""
    mark = MARKS / key
    if not mark.exists():
        mark.write_text(str(os.getpid()))
        await trio.sleep_forever()
    return os.getpid()


@queue.task(name="nap", lease=LEASE)
async def nap(seconds: float) -> int:
    await trio.sleep(seconds)
    return os.getpid()
