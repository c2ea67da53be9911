"""Chaos on the worker side, with the fault kit: a worker killed mid-job, a lease keeper
frozen (and thawed). Worker processes run ``_chaos_app`` (lease 0.3 s); commits are the
server's own count of completions, executions the job's log lines."""

from __future__ import annotations

from typing import Any

import trio

import echomq
from echomq import jobs
from echomq._scripts.keyspace import keyspace
from echomq.testing import (
    freeze_renewal,
    kill_worker,
    open_worker_process,
    thaw_renewal,
    wait_running,
)

from ._support import APP, HERE, app_env, commits, release, until


async def started(q: echomq.Queue, job_id: str, *, runs: int) -> bool:
    """``_chaos_app.hold`` logged its first line ``runs`` times (one per execution)."""
    return len(await jobs.get_job_logs(q.connection, q.name, job_id)) >= runs


def enqueuer(q: echomq.Queue) -> Any:
    """``hold`` on the producer's side (the worker processes run ``_chaos_app``'s)."""

    @q.task(name="hold", lease=0.3)
    async def hold() -> None:
        raise AssertionError("run by the worker processes only")

    return hold


async def test_a_worker_killed_mid_job_its_job_comes_back_and_completes_once(
    redis_url: str, queue: str
) -> None:
    """SIGKILL while the job runs; the next worker process recovers it (a stall) and
    runs it again: two executions, one commit."""
    q = echomq.Queue(queue, url=redis_url)
    options = {"url": redis_url, "cwd": HERE, "env": app_env(queue), "recovery_interval": 0.1}
    with trio.fail_after(30):
        async with q.open():
            handle = await enqueuer(q).delay()
            async with open_worker_process(APP, **options) as first:
                await wait_running(handle)
                await until(lambda: started(q, handle.id, runs=1))  # the task itself runs
                assert await kill_worker(first) == -9
            async with open_worker_process(APP, **options) as second:
                await wait_running(handle, attempt=2)
                await release(q.connection, queue, handle.id)
                assert await handle.result(timeout=10) == "held by 2"
                assert second.returncode is None
            info = await handle.info()
            runs = await jobs.get_job_logs(q.connection, queue, handle.id)
            assert await commits(q.connection, queue) == 1
    assert info is not None and info.token == 2 and info.stalled == 1
    assert [line.split(" in ")[0] for line in runs] == ["run 1", "run 2"]
    assert runs[0].split(" in ")[1] == str(first.pid)


async def test_frozen_renewal_the_job_is_taken_over_and_the_stale_complete_refused(
    redis_url: str, queue: str
) -> None:
    """The keeper stops: the lease lapses while the job runs; another worker takes it
    over (token 2) and commits; the stale holder's complete is refused by the fence."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task(name="hold", lease=0.3)  # the rescuer's twin of _chaos_app.hold
    async def hold(job: echomq.Job) -> str:
        return f"rescued with token {job.token}"

    rescuer = echomq.Worker(q, recovery_interval=0.05)
    with trio.fail_after(30):
        async with q.open():
            handle = await hold.delay()
            async with open_worker_process(
                APP,
                url=redis_url,
                cwd=HERE,
                env=app_env(queue),
                concurrency=1,  # its slot stays busy: it cannot take the job back itself
                recovery_interval=0.1,
            ) as stale:
                await wait_running(handle)
                await freeze_renewal(stale)
                async with trio.open_nursery() as nursery:
                    await nursery.start(rescuer.serve)
                    assert await handle.result(timeout=10) == "rescued with token 2"
                    refused = await stale.wait_for_log("settling refused")
                    rescuer.shutdown(grace=0)
                assert stale.returncode is None
            info = await handle.info()
            assert await commits(q.connection, queue) == 1
    assert "StaleToken" in refused
    assert info is not None and info.token == 2 and info.stalled == 1
    assert info.result == b'"rescued with token 2"'


async def test_thawed_renewal_renews_a_lapsed_lease_that_no_sweep_collected(
    redis_url: str, queue: str
) -> None:
    """Frozen, the lease's deadline passes; thawed, the keeper renews it (a lapsed lease
    not yet collected still extends) and the job completes on its first claim."""
    q = echomq.Queue(queue, url=redis_url)
    active = keyspace(queue).active

    async def lease_left_ms() -> float:
        """The lease's deadline minus the server's clock."""
        score = await q.connection.execute("ZSCORE", active, handle.id)
        seconds, micros = await q.connection.execute("TIME")
        return float(score) - (int(seconds) * 1000 + int(micros) // 1000)

    async def lapsed() -> bool:
        return await lease_left_ms() < 0

    async def renewed() -> bool:
        return await lease_left_ms() > 0

    with trio.fail_after(30):
        async with q.open():
            handle = await enqueuer(q).delay()
            async with open_worker_process(
                APP, url=redis_url, cwd=HERE, env=app_env(queue), recovery_interval=60
            ) as worker:  # one sweep, at its start: none while the lease is lapsed
                await wait_running(handle)
                await freeze_renewal(worker)
                await until(lapsed)
                await thaw_renewal(worker)
                await until(renewed)
                await release(q.connection, queue, handle.id)
                assert await handle.result(timeout=10) == "held by 1"
            info = await handle.info()
            assert await commits(q.connection, queue) == 1
    assert info is not None and info.token == 1 and info.stalled == 0
