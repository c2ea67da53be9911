"""Time limits: ``soft_timeout`` raises SoftTimeLimit inside the job (it may clean up);
``timeout`` stops it hard (a thread abandoned, a process child killed, an async task
cancelled; a value returned past it is not committed)."""

from __future__ import annotations

import math
import threading
import time

import pytest
import trio

import echomq
from echomq.errors import InvalidArgument

from . import _stop_tasks
from ._runtime import serving, until

LEASE = 0.3


def test_soft_timeout_must_be_below_timeout_at_registration(queue: str) -> None:
    """soft_timeout >= timeout, <= 0 or not finite: InvalidArgument when the task is made."""
    q = echomq.Queue(queue)
    for options in (
        {"soft_timeout": 2.0, "timeout": 2.0},
        {"soft_timeout": 3.0, "timeout": 2.0},
        {"soft_timeout": 0},
        {"soft_timeout": -1},
        {"soft_timeout": math.inf},
        {"soft_timeout": "1"},
    ):
        with pytest.raises(InvalidArgument):
            q.task(**options)(lambda: None)
    assert not q.tasks
    ok = q.task(name="ok", soft_timeout=1.0, timeout=2.0)(lambda: None)
    alone = q.task(name="alone", soft_timeout=1.0)(lambda: None)
    assert (ok.options.soft_timeout, alone.options.timeout) == (1.0, None)


async def test_an_async_task_catches_its_soft_limit_and_cleans_up(
    redis_url: str, queue: str
) -> None:
    """SoftTimeLimit arrives at the wait it is in; the task awaits its cleanup and returns."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task(lease=LEASE, soft_timeout=0.1, timeout=5)
    async def tidy(job: echomq.Job) -> str:
        try:
            await trio.sleep(10)
        except echomq.SoftTimeLimit as exc:
            await trio.sleep(0.01)  # awaiting after it is fine: it is not a cancellation
            await job.log(f"cleaning up: {exc}")
            return "cleaned up"
        return "slept"

    @q.task(lease=LEASE, soft_timeout=0.1)
    async def careless() -> str:
        await trio.sleep(10)
        return "slept"

    with trio.fail_after(10):
        async with q.open(), serving(echomq.Worker(q)):
            tidied = await tidy.delay()
            assert await tidied.result(timeout=5) == "cleaned up"
            logs = await echomq.jobs.get_job_logs(q.connection, queue, tidied.id)
            handle = await careless.delay()
            with pytest.raises(echomq.JobFailed) as failed:
                await handle.result(timeout=5)
    assert logs == ["cleaning up: ran longer than 0.1 s (the soft time limit)"]
    assert failed.value.error == "SoftTimeLimit: ran longer than 0.1 s (the soft time limit)"


async def test_a_cancel_still_passes_through_a_soft_limited_task(
    redis_url: str, queue: str
) -> None:
    """The soft limit's trampoline passes a cancellation from outside untouched."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task(lease=LEASE, soft_timeout=5)
    async def long() -> str:
        await trio.sleep(30)
        return "slept"

    with trio.fail_after(10):
        async with q.open(), serving(echomq.Worker(q)):
            handle = await long.delay()
            await echomq.testing.wait_running(handle)
            await handle.cancel("no need")
            with pytest.raises(echomq.JobCancelled):
                await handle.result(timeout=5)


async def test_a_thread_task_gets_its_soft_limit_at_its_next_instruction(
    redis_url: str, queue: str
) -> None:
    """A busy Python loop in a thread is interrupted by SoftTimeLimit (an async exception)."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task(lease=LEASE, soft_timeout=0.1, timeout=10)
    def crunch() -> str:
        n = 0
        try:
            while True:
                n += 1
        except echomq.SoftTimeLimit:
            return "stopped counting"

    with trio.fail_after(10):
        async with q.open(), serving(echomq.Worker(q)):
            assert await (await crunch.delay()).result(timeout=5) == "stopped counting"


async def test_a_process_task_gets_its_soft_limit_by_signal(redis_url: str, queue: str) -> None:
    """The child's own timer interrupts its sleep with SoftTimeLimit; it returns. (The limit
    counts from the job's start: a child still starting eats into it, hence the warm-up.)"""
    q = echomq.Queue(queue, url=redis_url)
    sleeper = q.task(process=True, lease=LEASE, soft_timeout=0.3)(_stop_tasks.soft_sleeper)
    pid = q.task(process=True, lease=LEASE)(_stop_tasks.pid)
    with trio.fail_after(60):  # a spawned child starts slowly
        async with q.open(), serving(echomq.Worker(q, concurrency=1)):
            child = await (await pid.delay()).result(timeout=40)  # the child is up
            assert await (await sleeper.delay(30)).result(timeout=40) == "cleaned up"
            assert await (await pid.delay()).result(timeout=40) == child  # and kept


async def test_a_hard_timeout_abandons_a_thread_and_kills_a_process_child(
    redis_url: str, queue: str
) -> None:
    """Past ``timeout`` the attempt fails (TimeoutError); the thread is abandoned and the
    child killed, each counted; the next process task gets a fresh child."""
    q = echomq.Queue(queue, url=redis_url)
    release = threading.Event()

    @q.task(lease=LEASE, timeout=0.2)
    def deaf() -> str:
        release.wait(30)
        return "finished anyway"

    spin = q.task(process=True, lease=LEASE, timeout=0.5)(_stop_tasks.spin)
    pid = q.task(process=True, lease=LEASE)(_stop_tasks.pid)
    worker = echomq.Worker(q)
    try:
        with trio.fail_after(60):
            async with q.open(), serving(worker):
                with pytest.raises(echomq.JobFailed) as thread_failed:
                    await (await deaf.delay()).result(timeout=5)
                with pytest.raises(echomq.JobFailed) as process_failed:
                    await (await spin.delay("/dev/null")).result(timeout=40)
                await (await pid.delay()).result(timeout=40)
                # a batched completion is counted once Redis answered the batch: the result
                # may be read first
                await until(lambda: worker.statistics().completed == 1)
                stats = worker.statistics()
    finally:
        release.set()
    assert thread_failed.value.error == "TimeoutError: ran longer than 0.2 s"
    assert process_failed.value.error == "TimeoutError: ran longer than 0.5 s"
    assert (stats.abandoned, stats.terminated, stats.completed) == (1, 1, 1)


async def test_a_value_returned_past_the_timeout_is_not_committed(
    redis_url: str, queue: str
) -> None:
    """An async handler that blocks the loop past its timeout and returns: it fails with
    TimeoutError (the timeout had no checkpoint to land on)."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task(lease=5, timeout=0.1)
    async def blocking() -> str:
        time.sleep(0.3)  # noqa: ASYNC251 - the bug under test
        return "too late"

    with trio.fail_after(10):
        async with q.open(), serving(worker := echomq.Worker(q)):
            with pytest.raises(echomq.JobFailed) as failed:
                await (await blocking.delay()).result(timeout=5)
            await until(lambda: worker.statistics().failed == 1)
    assert failed.value.error == "TimeoutError: ran longer than 0.1 s"
    assert worker.statistics().completed == 0
