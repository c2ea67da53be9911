"""Chaos between a worker and Redis, with the fault kit's FaultProxy: connections cut
under load, refused for a while, delayed. Nothing is lost, nothing is committed twice."""

from __future__ import annotations

import trio

import echomq
from echomq.testing import open_fault_proxy, open_worker_process

from ._support import APP, HERE, app_env, commits, until

JOBS = 60
CUTS = 5


def _producer(q: echomq.Queue) -> object:
    @q.task(name="work", lease=0.3)
    async def work(n: int, seconds: float = 0.0) -> int:
        raise AssertionError("run by the worker process only")

    return work


async def test_cutting_every_connection_under_load_loses_nothing_and_commits_once(
    redis_url: str, queue: str
) -> None:
    """Every connection of a busy worker is reset 5 times; every job completes, each
    committed once (a lost claim reply strands its jobs until recovery returns them)."""
    q = echomq.Queue(queue, url=redis_url)
    work = _producer(q)
    with trio.fail_after(40):
        async with q.open(), open_fault_proxy(redis_url) as proxy:
            handles = [await work.delay(n, 0.02) for n in range(JOBS)]  # type: ignore[attr-defined]
            async with open_worker_process(
                APP,
                url=proxy.url,
                cwd=HERE,
                env=app_env(queue),
                concurrency=8,
                recovery_interval=0.1,
                max_stalled=50,  # each lost claim reply counts a stall: never dead here
            ) as worker:
                for cut in range(1, CUTS + 1):

                    async def progressed(goal: int = cut * JOBS // (CUTS + 1)) -> bool:
                        return await commits(q.connection, queue) >= goal

                    await until(progressed)  # work goes on between two cuts
                    assert await proxy.cut() >= 1
                for n, handle in enumerate(handles):
                    assert await handle.result(timeout=20) == n * 2
                assert worker.returncode is None
            stats = await echomq.admin.stats(q.connection, queue)
    assert stats.completed_total == JOBS and stats.completed == JOBS
    assert stats.dead == stats.pending == stats.active == 0
    assert proxy.cuts >= CUTS and proxy.accepted > CUTS  # it reconnected after each cut


async def test_a_worker_cut_off_and_refused_for_a_while_carries_on_once_let_through(
    redis_url: str, queue: str
) -> None:
    """A partition (every connection cut, new ones refused) while jobs wait: the worker
    retries with backoff and does not die; let through again, it runs them all."""
    q = echomq.Queue(queue, url=redis_url)
    work = _producer(q)
    with trio.fail_after(40):
        async with q.open(), open_fault_proxy(redis_url) as proxy:
            async with open_worker_process(
                APP, url=proxy.url, cwd=HERE, env=app_env(queue), recovery_interval=0.1
            ) as worker:
                with proxy.refusing():
                    await proxy.cut()
                    handles = [await work.delay(n) for n in range(10)]  # type: ignore[attr-defined]

                    await proxy.wait_until(lambda: proxy.refused >= 2)  # it tried, and again
                    assert await commits(q.connection, queue) == 0
                for n, handle in enumerate(handles):
                    assert await handle.result(timeout=20) == n * 2
                assert worker.returncode is None
            assert await commits(q.connection, queue) == 10


async def test_a_slow_link_delays_jobs_but_loses_none(redis_url: str, queue: str) -> None:
    """Every byte held 20 ms each way (a lease of 300 ms renewed every 100 ms): all jobs
    complete once; none is taken over for a lease that looked lapsed."""
    q = echomq.Queue(queue, url=redis_url)
    work = _producer(q)
    with trio.fail_after(40):
        async with q.open(), open_fault_proxy(redis_url, delay=0.02) as proxy:
            async with open_worker_process(
                APP, url=proxy.url, cwd=HERE, env=app_env(queue), concurrency=4
            ):
                handles = [await work.delay(n, 0.2) for n in range(8)]  # type: ignore[attr-defined]
                for n, handle in enumerate(handles):
                    assert await handle.result(timeout=20) == n * 2
            infos = [await handle.info() for handle in handles]
            assert await commits(q.connection, queue) == 8
    assert all(info is not None and info.token == 1 for info in infos)
