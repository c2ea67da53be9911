"""Tasks that do not stop when asked, for the escalation, time-limit and watchdog tests.

Worker subprocesses serve ``queue`` (``_stop_tasks:queue``; its name and lease from the
environment the test sets); in-process tests register these module-level functions on
their own queue (process tasks must be module-level: a spawned child imports them).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import echomq

queue = echomq.Queue(os.environ.get("EMQ_TEST_QUEUE", "stop-tasks"))
LEASE = float(os.environ.get("EMQ_TEST_LEASE", "0.3"))


def spin(path: str, seconds: float = 30.0) -> str:
    """Write this process's pid to ``path``, then sleep in slices, deaf to any cancel."""
    Path(path).write_text(str(os.getpid()))
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.01)
    return "finished anyway"


def pid() -> int:
    return os.getpid()


def soft_sleeper(seconds: float) -> str:
    """Sleep; a soft time limit interrupts the sleep (SIGUSR1 in a process child)."""
    try:
        time.sleep(seconds)
    except echomq.SoftTimeLimit:
        return "cleaned up"
    return "slept"


@queue.task(name="block", lease=LEASE)
async def block(seconds: float) -> str:
    """Block the worker's event loop (a bug this worker survives, and reports)."""
    time.sleep(seconds)  # noqa: ASYNC251 - the bug under test
    return "unblocked"


@queue.task(name="block-marked", lease=LEASE)
async def block_marked(path: str, seconds: float) -> str:
    """Mark each run (one line per run in ``path``), then block the event loop."""
    with open(path, "a") as runs:  # noqa: ASYNC230 - blocking on purpose
        runs.write(f"{os.getpid()}\n")
    time.sleep(seconds)  # noqa: ASYNC251 - the bug under test
    return "unblocked"


@queue.task(name="hold", lease=LEASE)
async def hold(job: echomq.Job, seconds: float) -> str:
    """Hold the job (awaiting) for a while; log once per run."""
    await job.log(f"run {job.token} in {os.getpid()}")
    import trio

    await trio.sleep(seconds)
    return "held"
