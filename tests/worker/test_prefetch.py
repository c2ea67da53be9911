"""Prefetch (``_worker/claims.py`` rule 5): claimed jobs waiting for a slot are held like
running ones (renewed, reachable by a lost lease), never run once lost, and handed back at
once when the worker stops."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

import echomq
from echomq import jobs, stalled
from echomq._worker import room
from echomq._worker.settle import Settler
from echomq.app import Task

from ._runtime import serving, until, wait_state


@pytest.fixture(autouse=True)
def _always_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any turnover counts as fast: the worker prefetches once one cohort freed."""
    monkeypatch.setattr(room, "PREFETCH_TURNOVER", 3600.0)


def _hold(q: echomq.Queue, gate: trio.Event, ran: list[str]) -> Task:
    """A task ``hold(n)`` on ``q``: notes its job's id in ``ran``; n > 0 waits for ``gate``."""

    @q.task(name="hold", lease=0.3)
    async def hold(n: int) -> int:
        ran.append(echomq.current_job().id)
        if n:
            await gate.wait()
        return n

    return hold


async def _two_running_two_waiting(worker: echomq.Worker, hold: Task) -> list[echomq.TaskHandle]:
    """One warm-up job (the slots turn over), then 4 jobs: 2 run, 2 wait prefetched."""
    warm = await hold.delay(0)
    assert await warm.result(timeout=5) == 0
    handles = [await hold.delay(n) for n in range(1, 5)]
    await until(lambda: worker.statistics().prefetched == 2)
    return handles


@asynccontextmanager
async def prefetching(
    q: echomq.Queue, gate: trio.Event, **options: Any
) -> AsyncIterator[tuple[echomq.Worker, list[echomq.TaskHandle], list[str]]]:
    """A worker (concurrency 2, prefetch 2) with 2 jobs running on ``gate`` and 2 jobs
    prefetched behind them (after one warm-up job made the slots turn over)."""
    ran: list[str] = []
    hold = _hold(q, gate, ran)
    async with q.open():
        worker = echomq.Worker(q, concurrency=2, prefetch=2, **options)
        async with serving(worker):
            handles = await _two_running_two_waiting(worker, hold)
            yield worker, handles, ran


async def test_prefetched_jobs_wait_held_and_renewed(redis_url: str, queue: str) -> None:
    """Two jobs wait for a slot: active under the worker's lease, renewed past it (the
    sweeps run every 0.1 s), not running; they run once the slots free."""
    q = echomq.Queue(queue, url=redis_url)
    gate = trio.Event()
    with trio.fail_after(20):
        async with prefetching(q, gate, recovery_interval=0.1) as (worker, handles, ran):
            stats = worker.statistics()
            assert stats.held == 4 and stats.claimed == 5
            waiting = [h for h in handles if h.id not in ran]
            assert len(waiting) == 2
            keeper = worker._keeper
            assert keeper is not None
            ticks = keeper.ticks
            await until(lambda: keeper.ticks >= ticks + 5)  # 0.5 s: past the 0.3 s lease
            for handle in waiting:
                info = await jobs.get_job(q.connection, queue, handle.id)
                assert info is not None and info.state == "active"
                assert info.stalled == 0 and info.token == 1
            assert worker.statistics().recovered == 0
            gate.set()
            assert [await h.result(timeout=5) for h in handles] == [1, 2, 3, 4]
            assert worker.statistics().prefetched == 0


async def test_stop_hands_prefetched_jobs_back_before_the_grace(redis_url: str, queue: str) -> None:
    """A graceful stop: the prefetched jobs are back in pending at once (never run), while
    the running ones still have their grace; then those finish."""
    q = echomq.Queue(queue, url=redis_url)
    gate = trio.Event()
    with trio.fail_after(20):
        async with prefetching(q, gate, grace=30) as (worker, handles, ran):
            waiting = [h for h in handles if h.id not in ran]
            running = [h for h in handles if h.id in ran]
            worker.shutdown()
            for handle in waiting:
                info = await wait_state(q.connection, queue, handle.id, "pending")
                assert info.failures == 0 and info.stalled == 0
            assert worker.statistics().held == 2  # the running ones, in their grace
            gate.set()
            for handle in running:
                await wait_state(q.connection, queue, handle.id, "completed")
            await until(lambda: worker.statistics().held == 0)
            stats = worker.statistics()
    assert stats.released == 2 and stats.completed == 3 and stats.prefetched == 0
    assert not {h.id for h in waiting} & set(ran)


async def test_a_prefetched_job_that_lost_its_lease_never_runs(redis_url: str, queue: str) -> None:
    """A lost lease reaches a waiting job (the keeper's answer): when its slot frees it is
    counted lost and its handler never runs."""
    q = echomq.Queue(queue, url=redis_url)
    gate = trio.Event()
    with trio.fail_after(20):
        async with prefetching(q, gate) as (worker, handles, ran):
            waiting = [h for h in handles if h.id not in ran]
            lost = worker.inflight.get(waiting[0].id)
            worker.inflight.lose(lost.id, lost.token)  # as the keeper does on "stale"
            gate.set()
            await until(lambda: worker.statistics().lost == 1 and worker.statistics().held == 0)
            assert await waiting[1].result(timeout=5) in (3, 4)
    assert waiting[0].id not in ran


async def test_a_crash_hands_prefetched_jobs_back_uncounted(
    redis_url: str, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that fails (a bug in its batched completions) leaves its running jobs to
    recovery, counted as stalls; its prefetched jobs never started, so they are back in
    pending, uncounted."""
    q = echomq.Queue(queue, url=redis_url)
    gate = trio.Event()
    ran: list[str] = []
    hold = _hold(q, gate, ran)

    async def buggy_record(self: Settler, queue: str, batch: Any, settled: Any) -> None:
        raise RuntimeError("a bug in the worker")

    worker = echomq.Worker(q, concurrency=2, prefetch=2, recovery_interval=60)
    crashes: list[BaseException] = []

    async def serve() -> None:
        try:
            await worker.serve()
        except BaseException as exc:  # the crash, as an exception group
            crashes.append(exc)

    with trio.fail_after(20):
        async with q.open():
            conn = q.connection
            async with trio.open_nursery() as nursery:
                nursery.start_soon(serve)
                handles = await _two_running_two_waiting(worker, hold)
                monkeypatch.setattr(Settler, "_record", buggy_record)
                gate.set()  # the running two complete; recording their batch fails
            assert len(crashes) == 1 and isinstance(crashes[0], BaseExceptionGroup)
            assert crashes[0].subgroup(RuntimeError) is not None
            waiting = [h for h in handles if h.id not in ran]
            running = [h for h in handles if h.id in ran]
            assert len(waiting) == 2 and len(running) == 2
            for handle in waiting:
                info = await handle.info()
                assert info is not None and info.state == "pending" and info.stalled == 0
            dead: list[str] = []

            async def swept() -> bool:
                dead.extend((await stalled.check(conn, queue, max_stalled=1)).dead)
                return len(dead) == 2

            await until(swept, within=2)  # the running ones' leases were cut to 1 ms
    assert sorted(dead) == sorted(h.id for h in running)
