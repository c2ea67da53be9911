"""The real thing: jobs run by a Worker, their completions written by the scripts, folded
into the archive. Until the scripts write ``emq:{q}:completions`` (docs/results.md)
this test skips, saying so; from then on it runs, with no change here."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

import echomq
from echomq import jobs
from echomq._scripts.keyspace import Keyspace
from echomq.archive import ArchiveConfig, FinishState, history, serve_archive
from echomq.errors import JobCancelled, JobExpired, JobFailed

from ._support import until


@asynccontextmanager
async def serving(worker: echomq.Worker) -> AsyncIterator[None]:
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.serve)
        try:
            yield
        finally:
            worker.shutdown(grace=0)


@pytest.mark.both_backends
def test_jobs_finished_by_a_worker_are_archived_with_their_outcome(
    redis_url: str, queue: str, sqlite_url: str
) -> None:
    """Completed, dead, cancelled and expired jobs: task, outcome and attempts reach the
    archive.

    A plain test running trio itself: a skip raised inside pytest-trio loses its reason."""
    if not trio.run(scenario, redis_url, queue, sqlite_url):
        pytest.skip(
            "the scripts do not write emq:{q}:completions yet (docs/results.md): "
            "the archive is tested on entries the tests write (test_consumer.py)"
        )


async def scenario(redis_url: str, queue: str, sqlite_url: str) -> bool:
    """Run the jobs; answer False when the scripts wrote no completions entry."""
    q = echomq.Queue(queue, url=redis_url)
    started = trio.Event()

    @q.task(name="t.double")
    async def double(x: int) -> int:
        return 2 * x

    @q.task(name="t.broken", max_attempts=1)
    async def broken() -> None:
        raise ValueError("boom")

    @q.task(name="t.slow")
    async def slow() -> None:
        started.set()
        await trio.sleep_forever()

    with trio.fail_after(20):
        async with q.open(), serving(echomq.Worker(q, concurrency=4)):
            ok = await double.delay(21)
            assert await ok.result(timeout=5) == 42
            dead = await broken.delay()
            with pytest.raises(JobFailed):
                await dead.result(timeout=5)
            stopped = await slow.delay()
            await started.wait()
            await stopped.cancel("enough")
            with pytest.raises(JobCancelled):
                await stopped.result(timeout=5)
            past = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
            late = await double.apply((1,), expires=past)  # never runs: expired at its claim
            with pytest.raises(JobExpired):
                await late.result(timeout=5)
            conn = q.connection
            written = await conn.execute("XLEN", Keyspace(queue).completions)
            if written:
                async with trio.open_nursery() as nursery:
                    await nursery.start(
                        lambda task_status: serve_archive(
                            redis_url, [queue], sqlite_url,
                            config=ArchiveConfig(block=0.2), task_status=task_status,
                        )
                    )  # fmt: skip
                    await until(lambda: _archived(sqlite_url, queue, 4))
                    nursery.cancel_scope.cancel()
            rows = {h.id: await jobs.get_job(conn, queue, h.id) for h in (ok, dead, stopped, late)}
    if not written:
        return False

    page = await history(sqlite_url, queue)
    got = {j.id: j for j in page.jobs}
    assert set(got) == {ok.id, dead.id, stopped.id, late.id}
    a, b, c, d = got[ok.id], got[dead.id], got[stopped.id], got[late.id]
    assert (a.state, a.task, a.result, a.token) == (FinishState.COMPLETED, "t.double", b"42", 1)
    assert (b.state, b.task, b.token) == (FinishState.DEAD, "t.broken", 1)
    assert b.error is not None and "boom" in b.error
    assert (c.state, c.task, c.reason) == (FinishState.CANCELLED, "t.slow", "enough")
    assert (d.state, d.task, d.error, d.token) == (FinishState.EXPIRED, "t.double", "expired", 0)
    assert d.claimed_at is None
    for job in (a, b, c, d):
        row = rows[job.id]
        assert row is not None
        assert job.created_at == row.created_at and job.finished_at == row.finished_at
        assert job.claimed_at == row.claimed_at and job.failures == row.failures
    return True


async def _archived(store_url: str, queue: str, n: int) -> bool:
    page = await history(store_url, queue)
    return len(page.jobs) == n
