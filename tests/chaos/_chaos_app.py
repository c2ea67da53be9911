"""Tasks for the chaos tests' worker processes (``open_worker_process("_chaos_app:queue")``).

The queue name and the lease come from the environment the test sets (``EMQ_TEST_QUEUE``,
``EMQ_TEST_LEASE``). The test process registers same-named twins on its own ``Queue``
when it runs a rescuer in-process.
"""

from __future__ import annotations

import os

import trio

import echomq
from echomq import jobs

queue = echomq.Queue(os.environ.get("EMQ_TEST_QUEUE", "chaos"))
LEASE = float(os.environ.get("EMQ_TEST_LEASE", "0.3"))


@queue.task(name="work", lease=LEASE)
async def work(n: int, seconds: float = 0.0) -> int:
    """Touches nothing but its arguments (a cut connection cannot fail it)."""
    await trio.sleep(seconds)
    return n * 2


@queue.task(name="hold", lease=LEASE)
async def hold(job: echomq.Job) -> str:
    """Log one line per execution, then run until the test releases the job (progress
    ``release``) or a newer claim took it over; answer who returned. A lost connection
    is not its failure (the Redis chaos tests restart Redis under it)."""
    while True:  # an attempt may start while Redis restarts: its log line is retried too
        try:
            await job.log(f"run {job.token} in {os.getpid()}")
            break
        except echomq.ConnectionLost:
            await trio.sleep(0.02)
    while True:
        try:
            info = await jobs.get_job(queue.connection, queue.name, job.id)
        except echomq.ConnectionLost:  # Redis restarting under it: look again
            await trio.sleep(0.02)
            continue
        if info is None or info.token > job.token:
            return f"stale {job.token}"
        if info.progress == "release":
            return f"held by {job.token}"
        await trio.sleep(0.02)
