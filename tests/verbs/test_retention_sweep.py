"""The retention sweep (retention_sweep.lua, docs/results.md "Cleanup"): the finished-state
indexes and the completions stream lose what retention ended, bounded per call, never a
live row; and ``stats`` counts only jobs that exist, swept or not."""

from __future__ import annotations

import pytest
import trio

import echomq
from _waits import clock_past
from echomq import admin, jobs
from echomq._scripts.keyspace import Keyspace
from echomq.errors import InvalidArgument

from ._support import server_now_ms, snapshot

SHORT_MS = 400  # long enough that no finish of the test's setup cleans up after another


async def finish(
    conn: echomq.Connection,
    queue: str,
    n: int,
    *,
    keep_ms: int,
    dead: bool = False,
) -> list[str]:
    """n jobs, completed (or dead), each kept keep_ms; answers their ids."""
    if dead:
        new = [jobs.NewJob(payload=b"", keep_dead_ms=keep_ms) for _ in range(n)]
    else:
        new = [jobs.NewJob(payload=b"", keep_result_ms=keep_ms) for _ in range(n)]
    ids = await jobs.enqueue_many(conn, queue, new)
    held = await jobs.claim(conn, queue, 60_000, count=n)
    assert sorted(h.id for h in held) == sorted(ids)
    if dead:
        for h in held:
            assert await jobs.fail(conn, queue, h.id, h.token, "boom") == "dead"
    else:
        for i in range(0, n, 100):
            done = [(h.id, h.token, b"r") for h in held[i : i + 100]]
            await jobs.complete_many(conn, queue, done)
    return ids


async def past_retention(conn: echomq.Connection, ks: Keyspace, keep_ms: int) -> None:
    """Wait (server clock) until what finished before this call has outlived keep_ms, and
    the completions entries have outlived the queue's completions_keep."""
    await clock_past(conn, await server_now_ms(conn) + keep_ms + 2, ks.meta)


async def sweep_all(conn: echomq.Connection, queue: str, limit: int) -> list[admin.RetentionSweep]:
    steps = [await admin.sweep_retention(conn, queue, limit=limit)]
    while steps[-1].more:
        steps.append(await admin.sweep_retention(conn, queue, limit=limit))
        assert len(steps) < 1000
    return steps


async def test_an_idle_queue_after_retention_holds_nothing_expired_and_counts_zero(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """Before: completed and dead kept their members and the stream its entries until more
    jobs finished, and stats counted rows that did not exist."""
    await admin.ensure_schema(conn, queue)
    await admin.set_retention(conn, queue, completions_keep=SHORT_MS / 1000)
    await finish(conn, queue, 30, keep_ms=SHORT_MS)
    await finish(conn, queue, 12, keep_ms=SHORT_MS, dead=True)
    await past_retention(conn, ks, SHORT_MS)
    stats = await admin.stats(conn, queue)
    assert (stats.completed, stats.dead) == (0, 0)  # before any sweep: the score cut-off
    assert await conn.execute("ZCARD", ks.completed) == 30  # still the phantoms
    steps = await sweep_all(conn, queue, admin.MAX_SWEEP)
    assert sum(s.removed for s in steps) == 42
    assert sum(s.trimmed for s in steps) == 42
    assert sum(s.deleted for s in steps) == 0
    assert await conn.execute("EXISTS", ks.completed, ks.dead) == 0
    assert await conn.execute("XLEN", ks.completions) == 0  # kept: its groups, its last id
    keys = await snapshot(conn, ks)
    assert not [k for k in keys if b":job:" in k]
    stats = await admin.stats(conn, queue)
    assert (stats.completed, stats.dead, stats.jobs) == (0, 0, 0)
    again = await admin.sweep_retention(conn, queue)
    assert again == admin.RetentionSweep(removed=0, deleted=0, trimmed=0, more=False)


async def test_the_sweep_never_removes_a_job_that_is_not_expired(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """Kept jobs stay, rows and entries; a live row scored as ended (the index and the TTL
    disagree) stays and is scored again by its TTL; stats count the kept jobs."""
    kept = await finish(conn, queue, 4, keep_ms=600_000)
    kept_dead = await finish(conn, queue, 3, keep_ms=600_000, dead=True)
    short = await finish(conn, queue, 5, keep_ms=30)  # last: no finish cleans up after it
    await past_retention(conn, ks, 30)
    await conn.execute("ZADD", ks.completed, 1, kept[0])  # scored long ago, its row alive
    steps = await sweep_all(conn, queue, admin.MAX_SWEEP)
    assert sum(s.removed for s in steps) == 5
    for job_id in kept + kept_dead:
        assert await conn.execute("EXISTS", ks.job(job_id)) == 1
    assert sorted(m.decode() for m in await conn.execute("ZRANGE", ks.completed, 0, -1)) == (
        sorted(kept)
    )
    assert sorted(m.decode() for m in await conn.execute("ZRANGE", ks.dead, 0, -1)) == (
        sorted(kept_dead)
    )
    now = await server_now_ms(conn)
    assert float(await conn.execute("ZSCORE", ks.completed, kept[0])) > now + 500_000
    for job_id in short:
        assert await conn.execute("ZSCORE", ks.completed, job_id) is None
    # the default completions_keep (24 h): no entry is old enough to go
    assert await conn.execute("XLEN", ks.completions) == 12
    stats = await admin.stats(conn, queue)
    assert (stats.completed, stats.dead) == (4, 3)


async def test_a_row_in_another_state_only_leaves_the_index_and_an_old_row_gets_a_ttl(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A stale index entry of a pending job: the entry goes, the job stays pending. A
    completed row with no TTL (echomq 0.1): given finished_at + keep, or deleted when
    that is past."""
    (pending,) = await jobs.enqueue_many(conn, queue, [jobs.NewJob(payload=b"")])
    await conn.execute("ZADD", ks.completed, 1, pending)
    now = await server_now_ms(conn)
    await admin.ensure_schema(conn, queue)
    await admin.set_retention(conn, queue, keep_result=600)
    for job_id, finished in (("old-done", now - 700_000), ("old-live", now - 100_000)):
        await conn.execute("HSET", ks.job(job_id), "state", "completed", "finished_at", finished)
        await conn.execute("RPUSH", ks.logs(job_id), "a line")
        await conn.execute("ZADD", ks.completed, 1, job_id)
    step = await admin.sweep_retention(conn, queue)
    assert (step.removed, step.deleted, step.more) == (2, 1, False)
    info = await jobs.get_job(conn, queue, pending)
    assert info is not None and info.state == "pending"
    assert await conn.execute("EXISTS", ks.job("old-done"), ks.logs("old-done")) == 0
    ends = now - 100_000 + 600_000
    assert float(await conn.execute("ZSCORE", ks.completed, "old-live")) == ends
    assert 0 < await conn.execute("PTTL", ks.job("old-live")) <= 500_000
    assert 0 < await conn.execute("PTTL", ks.logs("old-live")) <= 500_000
    assert [m.decode() for m in await conn.execute("ZRANGE", ks.completed, 0, -1)] == ["old-live"]


async def test_each_call_is_bounded_and_says_when_more_remains(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """limit 7 over 20 ended members and 20 old entries: 7 entries per call, more until
    the last; nothing is looked at twice."""
    await admin.ensure_schema(conn, queue)
    await admin.set_retention(conn, queue, completions_keep=0.02)
    await finish(conn, queue, 20, keep_ms=20)
    await past_retention(conn, ks, 20)
    steps = await sweep_all(conn, queue, 7)
    assert all(s.removed + s.trimmed <= 7 for s in steps)
    assert [s.more for s in steps] == [True] * (len(steps) - 1) + [False]
    assert sum(s.removed for s in steps) == 20
    assert sum(s.trimmed for s in steps) == 20
    assert len(steps) in (6, 7)  # 40 entries, 7 a call (and a last call finding none)
    assert await conn.execute("EXISTS", ks.completed) == 0
    assert await conn.execute("XLEN", ks.completions) == 0


async def test_two_sweeps_at_once_remove_each_entry_once(
    conn: echomq.Connection, redis_url: str, queue: str, ks: Keyspace
) -> None:
    """Two connections sweeping the same queue together: the removals add up to what had
    ended, exactly; the kept jobs are untouched (their completions entries are as old as
    the others: the stream's retention is its own)."""
    await admin.ensure_schema(conn, queue)
    await admin.set_retention(conn, queue, completions_keep=SHORT_MS / 1000)
    kept = await finish(conn, queue, 10, keep_ms=600_000)
    await finish(conn, queue, 150, keep_ms=SHORT_MS)
    await finish(conn, queue, 40, keep_ms=SHORT_MS, dead=True)
    await past_retention(conn, ks, SHORT_MS)
    results: list[list[admin.RetentionSweep]] = []

    async def sweeper() -> None:
        async with echomq.connect(redis_url) as own:
            results.append(await sweep_all(own, queue, 9))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sweeper)
        nursery.start_soon(sweeper)
    steps = results[0] + results[1]
    assert sum(s.removed for s in steps) == 190
    assert sum(s.trimmed for s in steps) == 200
    assert sorted(m.decode() for m in await conn.execute("ZRANGE", ks.completed, 0, -1)) == (
        sorted(kept)
    )
    assert await conn.execute("EXISTS", ks.dead) == 0
    assert await conn.execute("XLEN", ks.completions) == 0
    stats = await admin.stats(conn, queue)
    assert (stats.completed, stats.dead) == (10, 0)


async def test_a_bad_limit_is_refused_before_any_io(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    for bad in (0, admin.MAX_SWEEP + 1, True, 1.5):
        with pytest.raises(InvalidArgument):
            await admin.sweep_retention(conn, queue, limit=bad)  # type: ignore[arg-type]
    assert await snapshot(conn, ks) == {}
