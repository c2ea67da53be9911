"""Cancel with a grace, end to end: a job that ignores its cancel is fenced when the grace
runs out, whatever its holder does, and stopped hard where that is possible.

- a thread task: fenced by its own worker, the thread abandoned (counted), its late
  value never committed;
- a process task: its child killed and replaced;
- a holder whose event loop is blocked: fenced by its watchdog's heartbeat;
- a holder that is gone (killed): fenced by another worker's heartbeat.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import trio

import echomq
from echomq import admin, jobs
from echomq.testing import kill_worker, wait_running
from worker import _stop_tasks
from worker._runtime import serving, until, worker_process

LEASE = 0.3


async def commits(conn: echomq.Connection, queue: str) -> tuple[int, int]:
    """(completed, cancelled) as the finishing scripts counted them (a fence finishes a job
    cancelled: it is no completion)."""
    stats = await admin.stats(conn, queue)
    return stats.completed_total, stats.cancelled_total


async def test_a_thread_task_that_ignores_its_cancel_is_fenced_and_abandoned(
    redis_url: str, queue: str
) -> None:
    """cancel(grace=0.2): the job ends cancelled while the thread still runs; the thread is
    abandoned and counted; its value, when it comes, is not committed."""
    q = echomq.Queue(queue, url=redis_url)
    release, returned = threading.Event(), threading.Event()

    @q.task(lease=LEASE)
    def deaf() -> str:
        release.wait(30)
        returned.set()
        return "finished anyway"

    worker = echomq.Worker(q, recovery_interval=0.1)
    with trio.fail_after(20):
        async with q.open(), serving(worker):
            handle = await deaf.delay()
            await wait_running(handle)
            assert await handle.cancel("stop", grace=0.2) == "signalled"
            with pytest.raises(echomq.JobCancelled) as caught:
                await handle.result(timeout=5)
            assert not returned.is_set()  # it ended cancelled while the thread ran
            await until(lambda: worker.statistics().held == 0)  # its slot is free
            stats = worker.statistics()
            assert (stats.abandoned, stats.cancelled, stats.held) == (1, 1, 0)
            release.set()
            await trio.to_thread.run_sync(returned.wait, 10)
            info = await handle.info()
            assert info is not None and info.cancel_reason == "stop" and info.cancelled
            assert info.cancel_fenced_at is not None
            assert await commits(q.connection, queue) == (0, 1)  # the fence; never the thread
            assert worker.statistics().completed == 0
    assert caught.value.reason == "stop"


async def test_a_process_task_that_ignores_its_cancel_has_its_child_killed(
    redis_url: str, queue: str, tmp_path: Path
) -> None:
    """The child running the call is killed; the next process task runs in a new child."""
    q = echomq.Queue(queue, url=redis_url)
    spin = q.task(process=True, lease=LEASE)(_stop_tasks.spin)
    pid = q.task(process=True, lease=LEASE)(_stop_tasks.pid)
    marker = tmp_path / "pid"
    worker = echomq.Worker(q, recovery_interval=0.1)
    with trio.fail_after(60):  # a spawned child starts slowly
        async with q.open(), serving(worker):
            handle = await spin.delay(str(marker))
            await until(lambda: marker.exists() and bool(marker.read_text()), 30)
            child = int(marker.read_text())
            assert await handle.cancel("enough", grace=0.1) == "signalled"
            with pytest.raises(echomq.JobCancelled):
                await handle.result(timeout=10)

            def gone() -> bool:
                try:
                    os.kill(child, 0)
                except ProcessLookupError:
                    return True
                return False

            await until(gone, 10)
            assert worker.statistics().terminated == 1
            fresh = await (await pid.delay()).result(timeout=30)
    assert fresh != child


async def test_grace_zero_stops_a_running_thread_task_at_once(redis_url: str, queue: str) -> None:
    """grace=0 answers `fenced`: the job is cancelled in Redis now, and its worker hears the
    fence and abandons the thread."""
    q = echomq.Queue(queue, url=redis_url)
    release = threading.Event()

    @q.task(lease=LEASE)
    def deaf() -> str:
        release.wait(30)
        return "finished anyway"

    worker = echomq.Worker(q)
    try:
        with trio.fail_after(20):
            async with q.open(), serving(worker):
                handle = await deaf.delay()
                await wait_running(handle)
                assert await handle.cancel("now", grace=0) == "fenced"
                with pytest.raises(echomq.JobCancelled):
                    await handle.result(timeout=5)
                await until(lambda: worker.statistics().held == 0)  # its slot is free
                assert worker.statistics().abandoned == 1
    finally:
        release.set()


async def test_a_holder_with_a_blocked_event_loop_is_fenced_by_its_watchdog(
    redis_url: str, queue: str, tmp_path: Path
) -> None:
    """The holder's loop is blocked (its handler sleeps without awaiting), so nothing in it
    runs; its watchdog thread's heartbeat fences the job when the grace runs out. The
    handler's value, returned later, is not committed."""
    q = echomq.Queue(queue, url=redis_url)
    with trio.fail_after(40):
        async with q.open():
            conn = q.connection
            async with worker_process(
                redis_url,
                queue,
                tmp_path / "worker.log",
                "--block-threshold",
                "0.2",
                lease=LEASE,
                target="_stop_tasks:queue",
                recovery_interval=0.1,
            ) as holder:
                job_id = await jobs.enqueue(conn, queue, b'{"task":"block","args":[2.0]}')
                handle = q.handle(job_id)
                await wait_running(handle)
                await holder.wait_for_log("event loop blocked")
                assert await handle.cancel("too slow", grace=0.2) == "signalled"
                with pytest.raises(echomq.JobCancelled):
                    await handle.result(timeout=1.5)  # the handler blocks for 2 s
                await holder.wait_for_log("event loop ran again")
                await until(
                    lambda: any(
                        "settling refused" in line or "was fenced" in line for line in holder.lines
                    ),
                    10,
                )
                assert await commits(conn, queue) == (0, 1)
                info = await handle.info()
                assert info is not None and info.cancel_reason == "too slow" and info.cancelled


async def test_a_holder_that_is_gone_is_fenced_by_another_workers_heartbeat(
    redis_url: str, queue: str
) -> None:
    """The holder is killed mid-job; the job's cancel grace ends before its lease could be
    recovered, and a live worker's heartbeat fences it: it never runs again."""
    q = echomq.Queue(queue, url=redis_url)
    q.task(name="hold", lease=30.0)(_stop_tasks.hold)  # a long lease: recovery is far off
    with trio.fail_after(40):
        async with q.open():
            conn = q.connection
            async with worker_process(
                redis_url, queue, None, lease=30.0, target="_stop_tasks:queue"
            ) as holder:
                job_id = await jobs.enqueue(conn, queue, b'{"task":"hold","args":[30]}')
                handle = q.handle(job_id)
                await wait_running(handle)
                await kill_worker(holder)
            bystander = echomq.Worker(q, heartbeat=0.1)
            async with serving(bystander):
                assert await handle.cancel("owner died", grace=0.2) == "signalled"
                with pytest.raises(echomq.JobCancelled):
                    await handle.result(timeout=5)
                # the outcome is on the stream before the beat that fenced it counts it
                await until(lambda: bystander.statistics().fenced == 1)
            info = await handle.info()
            assert info is not None and info.token == 2  # claimed once, fenced once
