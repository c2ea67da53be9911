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


@queue.task(name="stepped", lease=float(os.environ.get("EMQ_TEST_LEASE", "30")))
async def stepped(job: echomq.Job, block: bool) -> list[str]:
    """Three durable steps; each logs its side effect to the job's log list. With
    ``block``, the first run waits between steps two and three (for a kill -9)."""

    async def effect(name: str) -> str:
        await job.log(f"effect {name}")
        return name

    done = [await job.step("one", effect, "one"), await job.step("two", effect, "two")]
    if block and job.token == 1:
        await trio.sleep(60)
    done.append(await job.step("three", effect, "three"))
    return done
