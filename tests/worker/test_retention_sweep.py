"""Workers clean an idle queue after retention (docs/results.md "Cleanup"): the recovery
tick runs the retention sweep, so the indexes, the stream and the rows hold nothing
expired once retention has ended, with no new traffic, and ``stats`` says 0."""

from __future__ import annotations

from contextlib import AsyncExitStack

import trio

import echomq
from echomq import admin
from echomq._scripts.keyspace import Keyspace

from ._runtime import serving, until

KEEP = 0.3  # seconds: the queue's keep_result, keep_dead and completions_keep


async def idle_and_clean(conn: echomq.Connection, ks: Keyspace, kept: int) -> bool:
    """Nothing expired is left: only the kept completed jobs, in the index and as rows."""
    left = await conn.execute("ZCARD", ks.completed)
    dead = await conn.execute("ZCARD", ks.dead)
    entries = await conn.execute("XLEN", ks.completions)
    stats = await admin.stats(conn, ks.queue)
    return (left, dead, entries, stats.completed, stats.dead) == (kept, 0, 0, kept, 0)


async def run_mixed(q: echomq.Queue, workers: int) -> tuple[list[str], list[str]]:
    """60 completed and 20 dead jobs kept KEEP, 3 completed jobs kept 10 minutes, on
    ``workers`` workers sweeping every 0.1 s; once the queue is clean, answers the kept
    jobs' ids and the others'."""

    @q.task
    async def ok(n: int) -> int:
        return n

    @q.task(max_attempts=1)
    async def bad(n: int) -> int:
        raise ValueError(f"bad {n}")

    async with AsyncExitStack() as stack:
        for _ in range(workers):
            worker = echomq.Worker(q, concurrency=8, recovery_interval=0.1)
            await stack.enter_async_context(serving(worker))
        kept = [await ok.apply((i,), keep_result=600) for i in range(3)]
        gone = [await ok.delay(i) for i in range(60)] + [await bad.delay(i) for i in range(20)]

        async def all_ran() -> bool:
            stats = await admin.stats(q.connection, q.name)
            left = stats.pending + stats.scheduled + stats.active
            return left == 0 and stats.completed_total == 63  # and the 20 dead: no retry

        await until(all_ran, within=20)
        ks = Keyspace(q.name)
        await until(lambda: idle_and_clean(q.connection, ks, 3), within=20)
        assert [await handle.result(timeout=5) for handle in kept] == [0, 1, 2]
    return [handle.id for handle in kept], [handle.id for handle in gone]


async def test_an_idle_queue_after_retention_holds_nothing_expired(
    redis_url: str, queue: str
) -> None:
    """Before: with no new finishes the indexes kept their members, the stream its
    entries, and stats counted jobs that no longer existed."""
    q = echomq.Queue(queue, url=redis_url)
    ks = Keyspace(queue)
    with trio.fail_after(60):
        async with q.open():
            await admin.ensure_schema(q.connection, queue)  # the queue exists first
            await admin.set_retention(
                q.connection, queue, keep_result=KEEP, keep_dead=KEEP, completions_keep=KEEP
            )
            kept, gone = await run_mixed(q, workers=1)
            for job_id in gone:
                assert await q.connection.execute("EXISTS", ks.job(job_id)) == 0
            for job_id in kept:
                assert await q.connection.execute("EXISTS", ks.job(job_id)) == 1
            stats = await admin.stats(q.connection, queue)
            assert (stats.pending, stats.active, stats.dead, stats.completed) == (0, 0, 0, 3)


async def test_two_workers_sweeping_keep_what_is_not_expired(redis_url: str, queue: str) -> None:
    """Two workers on one queue sweep by turns (and may overlap): the kept jobs stay, the
    rest is gone, the counts are exact."""
    q = echomq.Queue(queue, url=redis_url)
    ks = Keyspace(queue)
    with trio.fail_after(60):
        async with q.open():
            await admin.ensure_schema(q.connection, queue)  # the queue exists first
            await admin.set_retention(
                q.connection, queue, keep_result=KEEP, keep_dead=KEEP, completions_keep=KEEP
            )
            kept, _ = await run_mixed(q, workers=2)
            members = await q.connection.execute("ZRANGE", ks.completed, 0, -1)
            assert sorted(m.decode() for m in members) == sorted(kept)
            for job_id in kept:
                assert await q.connection.execute("EXISTS", ks.job(job_id)) == 1
