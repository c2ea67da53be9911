"""Chaos on the Redis side, with the fault kit: a restart with AOF while a worker runs
(nothing lost, nothing committed twice), and an outage without AOF (the worker lives on)."""

from __future__ import annotations

import trio

import echomq
from echomq.testing import (
    RedisServer,
    drop_redis,
    open_worker_process,
    restart_redis,
    wait_running,
)

from ._support import APP, HERE, app_env, commits, release

JOBS = 40
HOLDS = 4


async def test_redis_restarted_with_aof_under_a_running_worker_loses_nothing(
    queue: str,
) -> None:
    """A crash (SIGKILL) and restart of an AOF Redis while a worker holds jobs (their
    leases stamped before the restart) and others wait: every job completes, each
    committed once."""
    with RedisServer(appendonly=True) as server:
        q = echomq.Queue(queue, url=server.url)

        @q.task(name="work", lease=0.3)
        async def work(n: int, seconds: float = 0.0) -> int:
            raise AssertionError("run by the worker process only")

        @q.task(name="hold", lease=0.3)
        async def hold() -> str:
            raise AssertionError("run by the worker process only")

        with trio.fail_after(40):
            async with open_worker_process(
                APP,
                url=server.url,
                cwd=HERE,
                env=app_env(queue),
                concurrency=8,
                recovery_interval=0.1,
            ) as worker:
                async with q.open():
                    holds = [await hold.delay() for _ in range(HOLDS)]
                    works = [await work.delay(n, 0.02) for n in range(JOBS)]
                    for handle in holds:
                        await wait_running(handle)
                await restart_redis(server)
                async with q.open():  # a new producer connection: the old one met the crash
                    for handle in holds:
                        await release(q.connection, queue, handle.id)
                    for handle in holds:
                        assert (await handle.result(timeout=20)).startswith("held by")
                    for n, handle in enumerate(works):
                        assert await handle.result(timeout=20) == n * 2
                    stats = await echomq.admin.stats(q.connection, queue)
                assert worker.returncode is None
    assert stats.completed_total == stats.completed == JOBS + HOLDS
    assert stats.dead == stats.pending == stats.active == 0


async def test_redis_gone_for_a_while_does_not_end_the_worker(queue: str) -> None:
    """No AOF: Redis dropped under a serving worker and back empty (same port): the
    worker lives on and runs the next job."""
    with RedisServer() as server:
        q = echomq.Queue(queue, url=server.url)
        work = q.task(name="work")(_twin)
        with trio.fail_after(40):
            async with open_worker_process(
                APP, url=server.url, cwd=HERE, env=app_env(queue)
            ) as worker:
                async with q.open():
                    assert await (await work.delay(1)).result(timeout=20) == 2
                async with drop_redis(server):
                    await worker.wait_for_log("WARNING")  # it noticed
                async with q.open():
                    assert await (await work.delay(2)).result(timeout=20) == 4
                    assert await commits(q.connection, queue) == 1  # the data is gone
                assert worker.returncode is None
            assert worker.returncode == 0  # a graceful stop at the end of the block


async def _twin(n: int, seconds: float = 0.0) -> int:
    raise AssertionError("run by the worker process only")
