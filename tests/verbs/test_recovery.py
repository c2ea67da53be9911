"""reap (crash recovery: counted, bounded) and release (shutdown hand-back: no count)."""

from __future__ import annotations

import pytest

import echomq
from echomq import jobs
from echomq._scripts import validate as v
from echomq._scripts.keyspace import Keyspace
from echomq.jobs import ExtendResult

from ._support import claim_one, field, lapse, run_id, snapshot


async def test_reap_returns_expired_leases_without_counting(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """The contract's reap: an expired lease goes back to pending, no stall counted."""
    job_id = await jobs.enqueue(conn, queue, b"x")
    for _ in range(3):  # never dead, however often
        await claim_one(conn, queue, lease_ms=20)
        await lapse(conn, ks, job_id)
        await conn.execute("DEL", ks.wake)
        assert await jobs.reap(conn, queue) == [job_id]
    info = await jobs.get_job(conn, queue, job_id)
    assert info is not None
    assert info.state is echomq.JobState.PENDING
    assert (info.token, info.failures, info.stalled) == (3, 0, 0)
    assert await conn.execute("ZSCORE", ks.active, job_id) is None
    assert await conn.execute("LRANGE", ks.wake, 0, -1) == [b"1"]


async def test_reap_counted_returns_expired_leases_counting_a_stall(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """The worker's reap: back to pending with one stall counted; token, failures kept."""
    job_id = await jobs.enqueue(conn, queue, b"x")
    await claim_one(conn, queue, lease_ms=20)
    await lapse(conn, ks, job_id)
    await conn.execute("DEL", ks.wake)
    sweep = await jobs.reap_counted(conn, queue)
    assert (sweep.recovered, sweep.dead) == ([job_id], [])
    info = await jobs.get_job(conn, queue, job_id)
    assert info is not None
    assert info.state is echomq.JobState.PENDING
    assert (info.token, info.failures, info.stalled) == (1, 0, 1)
    assert await conn.execute("ZSCORE", ks.active, job_id) is None
    assert await conn.execute("LRANGE", ks.wake, 0, -1) == [b"1"]


@pytest.mark.parametrize("max_recoveries", [0, 1, 3])
async def test_reap_dead_letters_a_job_past_max_recoveries(
    conn: echomq.Connection, queue: str, ks: Keyspace, max_recoveries: int
) -> None:
    """A job whose claims keep ending in a crash is recovered max_recoveries times, then dead."""
    job_id = await jobs.enqueue(conn, queue, b"x", max_attempts=10)
    for stall in range(1, max_recoveries + 2):
        await claim_one(conn, queue, lease_ms=20)
        await lapse(conn, ks, job_id)
        sweep = await jobs.reap_counted(conn, queue, max_recoveries=max_recoveries)
        if stall <= max_recoveries:
            assert (sweep.recovered, sweep.dead) == ([job_id], [])
    assert (sweep.recovered, sweep.dead) == ([], [job_id])
    info = await jobs.get_job(conn, queue, job_id)
    assert info is not None and info.state is echomq.JobState.DEAD
    assert info.last_error == "stalled" and info.stalled == max_recoveries + 1
    assert info.failures == 0 and info.finished_at is not None
    assert await conn.execute("ZSCORE", ks.dead, job_id) is not None
    assert await conn.execute("ZSCORE", ks.pending, job_id) is None
    assert await conn.execute("HGET", ks.metrics_dead, "count") == b"1"


@pytest.mark.parametrize("epoch", ["another-run", None])
async def test_reap_recovers_a_lease_from_before_a_restart_without_counting(
    conn: echomq.Connection, queue: str, ks: Keyspace, epoch: str | None
) -> None:
    """lease_epoch of another server run (or none): recovered, never counted, never dead."""
    job_id = await jobs.enqueue(conn, queue, b"x")
    await claim_one(conn, queue, lease_ms=20)
    assert await field(conn, ks, job_id, "lease_epoch") == (await run_id(conn, ks)).encode()
    if epoch is None:
        await conn.execute("HDEL", ks.job(job_id), "lease_epoch")
    else:
        await conn.execute("HSET", ks.job(job_id), "lease_epoch", epoch)
    await lapse(conn, ks, job_id)
    sweep = await jobs.reap_counted(conn, queue, max_recoveries=0)
    assert (sweep.recovered, sweep.dead) == ([job_id], [])
    info = await jobs.get_job(conn, queue, job_id)
    assert info is not None and info.state is echomq.JobState.PENDING and info.stalled == 0


async def test_reap_leaves_live_leases_and_drops_ghosts(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """An unexpired lease stays; an expired id with no row leaves active and gets no row."""
    live = await jobs.enqueue(conn, queue, b"x")
    await claim_one(conn, queue, lease_ms=60_000)
    await conn.execute("ZADD", ks.active, 0, "ghost")
    assert await jobs.reap(conn, queue) == []
    assert await conn.execute("ZRANGE", ks.active, 0, -1) == [live.encode()]
    assert await conn.execute("EXISTS", ks.job("ghost")) == 0
    assert await conn.execute("ZSCORE", ks.pending, "ghost") is None


async def test_reaped_job_is_first_in_its_priority_band(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A recovered job goes ahead of jobs of its priority that waited, not of higher ones."""
    job_id = await jobs.enqueue(conn, queue, b"x")
    await claim_one(conn, queue, lease_ms=20)
    waiting = await jobs.enqueue(conn, queue, b"y")
    higher = await jobs.enqueue(conn, queue, b"z", priority=1)
    await lapse(conn, ks, job_id)
    await jobs.reap(conn, queue)
    claimed = await jobs.claim(conn, queue, 1_000, count=3)
    assert [c.id for c in claimed] == [higher, job_id, waiting]


async def test_release_hands_jobs_back_fenced_and_uncounted(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """release answers per id; released jobs are pending at once with no count."""
    ids = await jobs.enqueue_many(conn, queue, [jobs.NewJob(payload=b"") for _ in range(3)])
    held = {c.id: c for c in await jobs.claim(conn, queue, 20, count=3)}
    mine, stale, reaped = ids
    await lapse(conn, ks, *ids)
    await jobs.extend_locks(conn, queue, [(mine, 1), (stale, 1)], 60_000)
    await jobs.reap(conn, queue)  # collects `reaped`
    await conn.execute("HINCRBY", ks.job(stale), "token", 1)  # as if claimed again
    await conn.execute("DEL", ks.wake)
    untouched = {k: v for k, v in (await snapshot(conn, ks)).items() if mine.encode() not in k}

    result = await jobs.release(
        conn,
        queue,
        [
            (mine, held[mine].token),
            (stale, held[stale].token),
            (reaped, held[reaped].token),
            ("never-enqueued", 1),
        ],
    )

    assert result == {
        mine: ExtendResult.OK,
        stale: ExtendResult.STALE,
        reaped: ExtendResult.NOT_ACTIVE,
        "never-enqueued": ExtendResult.GONE,
    }
    info = await jobs.get_job(conn, queue, mine)
    assert info is not None
    assert info.state is echomq.JobState.PENDING
    assert (info.token, info.failures, info.stalled) == (1, 0, 0)
    assert await conn.execute("ZSCORE", ks.active, mine) is None
    assert await conn.execute("LRANGE", ks.wake, 0, -1) == [b"1"]
    after = await snapshot(conn, ks)
    for key, value in untouched.items():
        if key not in (ks.pending.encode(), ks.active.encode(), ks.wake.encode()):
            assert after[key] == value, key
    assert await field(conn, ks, stale, "state") == b"active"


async def test_release_of_nothing_held_changes_nothing(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A release whose every pair is refused writes nothing."""
    job_id = await jobs.enqueue(conn, queue, b"x")
    held = await claim_one(conn, queue)
    before = await snapshot(conn, ks)
    result = await jobs.release(conn, queue, [(job_id, held.token + 1), ("nobody", 3)])
    assert result == {job_id: ExtendResult.STALE, "nobody": ExtendResult.GONE}
    assert await snapshot(conn, ks) == before


@pytest.mark.parametrize("count", [1, 100])
async def test_wake_list_stays_short(
    conn: echomq.Connection, queue: str, ks: Keyspace, count: int
) -> None:
    """However much work is made claimable, the wake list holds at most 64 tokens."""
    for _ in range(80):
        await jobs.enqueue_many(conn, queue, [jobs.NewJob(payload=b"") for _ in range(count)])
    assert await conn.execute("LLEN", ks.wake) == 64
    claimed = await jobs.claim(conn, queue, 20, count=min(80 * count, v.MAX_COUNT))
    await lapse(conn, ks, claimed[0].id)
    await jobs.reap(conn, queue)
    assert await conn.execute("LLEN", ks.wake) == 64
