"""Leases and recovery: the worked example of docs/runtime.md, crashed workers, stale
holders, the guard."""

from __future__ import annotations

import signal
import threading
from typing import Any

import pytest
import trio
import trio.testing

import echomq
from echomq import jobs, stalled
from echomq._worker.settle import Settler
from echomq.errors import JobFailed
from echomq.stalled import take_sweep_guard
from echomq.testing import kill_worker, wait_running

from ._runtime import serving, until, wait_state, worker_process


async def test_long_job_with_short_lease_completes_exactly_once(redis_url: str, queue: str) -> None:
    """The worked example, scaled down: lease 300 ms, a 1 s handler, a sweep every 50 ms:
    one run."""
    q = echomq.Queue(queue, url=redis_url)
    runs: list[int] = []

    @q.task(lease=0.3)
    async def long(job: echomq.Job) -> str:
        runs.append(job.token)
        for _ in range(10):
            await trio.sleep(0.1)
            await job.checkpoint()
        return "done"

    worker = echomq.Worker(q, recovery="stalled", recovery_interval=0.05, max_stalled=1)
    with trio.fail_after(10):
        async with q.open(), serving(worker):
            handle = await long.delay()
            assert await handle.result(timeout=5) == "done"
            info = await handle.info()
            completed = await q.connection.execute(
                "HGET", f"emq:{{{queue}}}:metrics:completed", "count"
            )
    assert runs == [1]
    assert info is not None and info.token == 1 and info.stalled == 0
    assert completed == b"1"


async def test_lease_keeper_renews_a_job_that_never_checkpoints(redis_url: str, queue: str) -> None:
    """Without explicit checkpoints the keeper renews the lease: no sweep takes the job."""
    q = echomq.Queue(queue, url=redis_url)
    runs: list[int] = []

    @q.task(lease=0.2)
    async def quiet(job: echomq.Job) -> str:
        runs.append(job.token)
        await trio.sleep(0.8)
        return "done"

    worker = echomq.Worker(q, recovery="stalled", recovery_interval=0.05)
    with trio.fail_after(10):
        async with q.open(), serving(worker):
            handle = await quiet.delay()
            assert await handle.result(timeout=5) == "done"
            info = await handle.info()
    assert runs == [1]
    assert info is not None and info.stalled == 0


@pytest.mark.parametrize(("max_stalled", "outcome"), [(2, "recovered"), (1, "dead")])
async def test_killed_worker_job_is_recovered_or_dead_lettered(
    redis_url: str, queue: str, max_stalled: int, outcome: str
) -> None:
    """SIGKILL mid-job: another worker's stalled sweep recovers it, or dead-letters it at max."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task(name="sleepy", lease=0.3)
    async def fast(seconds: float) -> str:
        job = echomq.current_job()  # the run number counts the stalled run
        return f"recovered by another worker: run {job.attempt} after {job.failures} failures"

    with trio.fail_after(20):
        async with q.open():
            handle = await fast.delay(30)
            # its recovery guard (taken at start) lapses within 0.1 s, so the rescuer may sweep
            async with worker_process(redis_url, queue, lease=0.3, recovery_interval=0.1) as proc:
                await wait_running(handle)
                assert await kill_worker(proc) == -signal.SIGKILL
            rescuer = echomq.Worker(
                q, recovery="stalled", recovery_interval=0.05, max_stalled=max_stalled
            )
            async with serving(rescuer):
                if outcome == "recovered":
                    assert await handle.result(timeout=5) == (
                        "recovered by another worker: run 2 after 0 failures"
                    )
                else:
                    with pytest.raises(JobFailed) as caught:
                        await handle.result(timeout=5)
                    assert caught.value.error == "stalled"
            info = await handle.info()
            commits = (await echomq.admin.stats(q.connection, queue)).completed_total
    assert info is not None and info.stalled == 1
    assert info.token == (2 if outcome == "recovered" else 1)
    assert commits == (1 if outcome == "recovered" else 0)


async def test_stale_holder_abandons_its_job_when_the_keeper_sees_the_takeover(
    redis_url: str, queue: str
) -> None:
    """A holder whose lease was taken over is cancelled by its keeper and never settles."""
    q = echomq.Queue(queue, url=redis_url)
    executions: list[int] = []
    gate = threading.Event()
    returned = threading.Event()

    @q.task(lease=0.3)
    def blocking() -> str:
        executions.append(echomq.current_job().token)
        gate.wait(5)
        returned.set()
        return "from the stale holder"

    worker = echomq.Worker(q, concurrency=1, recovery_interval=60)
    try:
        with trio.fail_after(10):
            async with q.open(), serving(worker):
                conn = q.connection
                handle = await blocking.delay()
                await wait_state(conn, queue, handle.id, "active")
                # the takeover: the lease is handed back, and a new holder claims it
                assert await jobs.release(conn, queue, [(handle.id, 1)]) == {handle.id: "ok"}
                (claimed,) = await jobs.claim(conn, queue, 60_000)
                assert claimed.token == 2
                await until(lambda: worker.statistics().lost > 0)
                gate.set()
                await until(returned.is_set)  # the abandoned thread returns...
                await trio.testing.wait_all_tasks_blocked(cushion=0.02)  # ...nothing settles
                info = await handle.info()
                assert info is not None and info.state == "active" and info.result is None
                assert info.failures == 0 and info.token == 2
                await jobs.complete(conn, queue, handle.id, 2, b'"from the new holder"')
                assert await handle.result(timeout=5) == "from the new holder"
    finally:
        gate.set()
    assert executions == [1]
    stats = worker.statistics()
    assert stats.completed == 0 and stats.failed == 0 and stats.retried == 0


@pytest.mark.parametrize("ending", ["returns", "raises"])
async def test_stale_holder_can_neither_complete_nor_fail(
    redis_url: str, queue: str, ending: str
) -> None:
    """A holder that finishes after a takeover is refused by the fence: no commit of its own."""
    q = echomq.Queue(queue, url=redis_url)
    executions: list[int] = []
    finish = trio.Event()

    @q.task(lease=30.0, max_attempts=5)  # the keeper ticks every 10 s: it will not notice
    async def slow(job: echomq.Job) -> str:
        executions.append(job.token)
        await finish.wait()
        if ending == "raises":
            raise RuntimeError("late failure")
        return "late result"

    worker = echomq.Worker(q, concurrency=1, recovery_interval=60)
    with trio.fail_after(10):
        async with q.open(), serving(worker):
            conn = q.connection
            handle = await slow.delay()
            await wait_state(conn, queue, handle.id, "active")
            await jobs.release(conn, queue, [(handle.id, 1)])
            (claimed,) = await jobs.claim(conn, queue, 60_000)
            finish.set()
            await until(lambda: worker.statistics().lost > 0)
            info = await handle.info()
            assert info is not None and info.state == "active"
            assert info.result is None and info.failures == 0 and info.last_error is None
            await jobs.complete(conn, queue, handle.id, claimed.token, b'"new holder"')
            assert await handle.result(timeout=5) == "new holder"
    assert executions == [1]
    stats = worker.statistics()
    assert stats.completed == 0 and stats.failed == 0 and stats.retried == 0


async def test_sweep_guard_lets_one_worker_sweep_per_interval(
    conn: echomq.Connection, queue: str
) -> None:
    """The guard is taken once per interval: a second taker is refused until it lapses."""
    assert await take_sweep_guard(conn, queue, "worker-a", 100)
    assert not await take_sweep_guard(conn, queue, "worker-b", 100)
    await until(lambda: take_sweep_guard(conn, queue, "worker-b", 100), within=2)


async def test_two_workers_share_one_sweep_per_interval(redis_url: str, queue: str) -> None:
    """Two workers on one queue sweep about once per interval between them, not twice."""
    q = echomq.Queue(queue, url=redis_url)
    first, second = echomq.Worker(q, recovery_interval=0.1), echomq.Worker(q, recovery_interval=0.1)
    with trio.fail_after(10):
        async with q.open(), serving(first), serving(second):
            start = trio.current_time()

            def sweeps() -> int:
                return first.statistics().sweeps + second.statistics().sweeps

            await until(lambda: sweeps() >= 5)
            elapsed = trio.current_time() - start
            done = sweeps()
    assert done <= elapsed / 0.09 + 2  # one sweep per interval between them, not two


async def test_a_failing_worker_leaves_its_jobs_to_recovery_counted(
    redis_url: str, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error escaping serve is a crash: held jobs are not released uncounted; their
    leases are cut, and the next sweep counts them as stalls (dead at max_stalled=1)."""
    q = echomq.Queue(queue, url=redis_url)
    started = trio.Event()

    @q.task(name="quick")
    async def quick() -> str:
        await started.wait()
        return "done"

    @q.task(name="slow")
    async def slow() -> None:
        started.set()
        await trio.sleep_forever()

    async def buggy_settle(self: Settler, held: Any, settlement: Any) -> bool:
        raise RuntimeError("a bug in the worker")

    async def buggy_record(self: Settler, queue: str, batch: Any, settled: Any) -> None:
        raise RuntimeError("a bug in the worker")

    monkeypatch.setattr(Settler, "_settle", buggy_settle)
    monkeypatch.setattr(Settler, "_record", buggy_record)  # the batched completions
    worker = echomq.Worker(q, concurrency=2, recovery_interval=60)
    with trio.fail_after(10):
        async with q.open():
            conn = q.connection
            first = await slow.delay()
            second = await quick.delay()
            with pytest.RaisesGroup(
                pytest.RaisesExc(RuntimeError, match="a bug in the worker"), flatten_subgroups=True
            ):
                await worker.serve()
            for handle in (first, second):
                info = await handle.info()
                assert info is not None and info.state == "active"  # not handed back
            assert worker.statistics().released == 0
            dead: list[str] = []

            async def swept() -> bool:
                dead.extend((await stalled.check(conn, queue, max_stalled=1)).dead)
                return len(dead) == 2

            await until(swept, within=2)  # the leases were cut to 1 ms
    assert sorted(dead) == sorted([first.id, second.id])
