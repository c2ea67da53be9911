"""@queue.task(process=True): CPU-bound plain functions run in the worker's process pool."""

from __future__ import annotations

import os

import pytest
import trio

import echomq
from echomq.errors import InvalidArgument

from . import _cpu_tasks


async def test_a_process_task_runs_in_another_process(redis_url: str, queue: str) -> None:
    """The result is computed in a child process (another pid) and read back as JSON."""
    q = _cpu_tasks.queue
    q.name = queue  # a queue of this test's own
    q.url = redis_url
    worker = echomq.Worker(q, concurrency=2)
    with trio.fail_after(60):  # the first job waits for the spawned child to start
        async with q.open(), trio.open_nursery() as nursery:
            await nursery.start(worker.serve)
            handle = await _cpu_tasks.sum_squares.delay(1000)
            result = await handle.result(timeout=50)
            nursery.cancel_scope.cancel()
    assert result["sum"] == sum(i * i for i in range(1000))
    assert result["pid"] != os.getpid()


def test_process_refuses_what_cannot_cross(queue: str) -> None:
    """A coroutine, a Job parameter or a local function cannot be a process task."""
    q = echomq.Queue(queue)

    async def coro() -> None:
        return None

    def with_job(job: echomq.Job) -> None:
        return None

    def local() -> None:
        return None

    for fn in (coro, with_job, local):
        with pytest.raises(InvalidArgument):
            q.task(name=fn.__name__, process=True)(fn)
