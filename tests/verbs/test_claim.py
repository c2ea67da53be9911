"""claim: priority then FIFO, count, the pause gate, delayed promotion, the lease stamp."""

from __future__ import annotations

import echomq
from _waits import due
from echomq import jobs
from echomq._scripts.keyspace import Keyspace

from ._support import eventually, field, run_id, server_now_ms, snapshot


async def test_fifo_within_a_priority(conn: echomq.Connection, queue: str) -> None:
    """Jobs of one priority are claimed in enqueue order."""
    ids = [await jobs.enqueue(conn, queue, str(i)) for i in range(5)]
    got = [(await jobs.claim(conn, queue, 1_000))[0].id for _ in ids]
    assert got == ids


async def test_higher_priority_is_claimed_first(conn: echomq.Connection, queue: str) -> None:
    """Higher priority runs first; FIFO inside each priority; negative priorities last."""
    low = await jobs.enqueue(conn, queue, b"", priority=-3)
    zero = await jobs.enqueue(conn, queue, b"", priority=0)
    high_a = await jobs.enqueue(conn, queue, b"", priority=5)
    top = await jobs.enqueue(conn, queue, b"", priority=4095)
    high_b = await jobs.enqueue(conn, queue, b"", priority=5)
    claimed = await jobs.claim(conn, queue, 1_000, count=5)
    assert [c.id for c in claimed] == [top, high_a, high_b, zero, low]


async def test_count_claims_many_in_one_call(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """count=N answers up to N jobs, each with token 1, payload and failures, all active."""
    ids = await jobs.enqueue_many(
        conn, queue, [jobs.NewJob(payload=f"p{i}".encode()) for i in range(4)]
    )
    claimed = await jobs.claim(conn, queue, 1_000, count=3)
    assert [c.id for c in claimed] == ids[:3]
    assert [c.payload for c in claimed] == [b"p0", b"p1", b"p2"]
    assert {c.token for c in claimed} == {1}
    assert {c.failures for c in claimed} == {0}
    assert await conn.execute("ZCARD", ks.active) == 3
    rest = await jobs.claim(conn, queue, 1_000, count=3)
    assert [c.id for c in rest] == ids[3:]
    assert await jobs.claim(conn, queue, 1_000, count=3) == []


async def test_claim_grants_a_lease_on_the_server_clock(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """The active score is server now + lease; the row is active, stamped and timed."""
    job_id = await jobs.enqueue(conn, queue, b"x")
    before = await server_now_ms(conn)
    [held] = await jobs.claim(conn, queue, 30_000)
    after = await server_now_ms(conn)
    score = float(await conn.execute("ZSCORE", ks.active, job_id))
    assert before + 30_000 <= score <= after + 30_000
    assert await field(conn, ks, job_id, "state") == b"active"
    assert await field(conn, ks, job_id, "token") == b"1"
    claimed_at = int(await field(conn, ks, job_id, "claimed_at") or 0)
    assert before <= claimed_at <= after
    assert held.token == 1


async def test_claim_stamps_lease_epoch_with_server_run_id(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """lease_epoch on a claimed row is the run_id of INFO server."""
    job_id = await jobs.enqueue(conn, queue, b"x")
    await jobs.claim(conn, queue, 1_000)
    assert await field(conn, ks, job_id, "lease_epoch") == (await run_id(conn, ks)).encode()


async def test_paused_queue_claims_nothing_and_keeps_its_backlog(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """The paused field gates the claim; nothing is written; clearing it serves the head."""
    first = await jobs.enqueue(conn, queue, b"x")
    later = await jobs.enqueue(conn, queue, b"y", delay_ms=1)
    await conn.execute("HSET", ks.meta, "paused", "1")
    await due(conn, queue, later)  # the scheduled job is due, but a paused claim promotes nothing
    before = await snapshot(conn, ks)
    assert await jobs.claim(conn, queue, 1_000, count=10) == []
    assert await snapshot(conn, ks) == before
    await conn.execute("HDEL", ks.meta, "paused")
    assert [c.id for c in await jobs.claim(conn, queue, 1_000)] == [first]


async def test_due_scheduled_jobs_are_promoted_then_claimed(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A delayed job waits in the schedule set, then a claim promotes and takes it."""
    job_id = await jobs.enqueue(conn, queue, b"later", delay_ms=50)
    assert await field(conn, ks, job_id, "state") == b"scheduled"
    assert await jobs.claim(conn, queue, 1_000) == []
    assert await conn.execute("ZSCORE", ks.schedule, job_id) is not None
    claimed = await eventually(lambda: jobs.claim(conn, queue, 1_000))
    assert [c.id for c in claimed] == [job_id]
    assert claimed[0].payload == b"later"
    assert await conn.execute("ZSCORE", ks.schedule, job_id) is None


async def test_promoted_jobs_keep_priority_order(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """Promotion places each job by its priority, behind ready jobs of that priority."""
    ready = await jobs.enqueue(conn, queue, b"", priority=1)
    later_low = await jobs.enqueue(conn, queue, b"", delay_ms=1, priority=0)
    later_high = await jobs.enqueue(conn, queue, b"", delay_ms=1, priority=1)
    await due(conn, queue, later_low, later_high)
    claimed = await jobs.claim(conn, queue, 1_000, count=3)
    assert [c.id for c in claimed] == [ready, later_high, later_low]


async def test_promotion_beyond_count_pushes_a_wake_token(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """Promoted jobs the claim did not take wake the other idle consumers."""
    ids = await jobs.enqueue_many(
        conn, queue, [jobs.NewJob(payload=b"", delay_ms=1) for _ in range(3)]
    )
    assert await conn.execute("LLEN", ks.wake) == 0
    await due(conn, queue, *ids)
    assert len(await jobs.claim(conn, queue, 1_000, count=1)) == 1
    assert await conn.execute("LRANGE", ks.wake, 0, -1) == [b"3"]


async def test_claim_on_empty_queue_answers_empty_and_writes_nothing(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """Nothing ready: an empty list, and no key is created."""
    assert await jobs.claim(conn, queue, 1_000, count=5) == []
    assert await snapshot(conn, ks) == {}


async def test_pending_id_without_row_is_dropped_not_claimed(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A pending id with no row leaves pending, is not claimed, and gets no row."""
    real = await jobs.enqueue(conn, queue, b"x")
    await conn.execute("ZADD", ks.pending, -(2**41), "ghost")
    claimed = await jobs.claim(conn, queue, 1_000, count=2)
    assert [c.id for c in claimed] == [real]
    assert await conn.execute("EXISTS", ks.job("ghost")) == 0
    assert await conn.execute("ZSCORE", ks.active, "ghost") is None


async def test_active_is_kept_in_the_skiplist_encoding(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A claim of 8 jobs or more that creates active, or adds to one Redis holds as a
    listpack (a queue from before, or a set of a few leases), leaves it a skiplist
    (O(log n) per member, not a scan of the set) holding exactly the leases: the member
    that converts it is gone. A smaller claim leaves the encoding as it is."""
    ids = await jobs.enqueue_many(conn, queue, [jobs.NewJob(payload=b"x") for _ in range(17)])
    [first] = await jobs.claim(conn, queue, 30_000)
    assert await conn.execute("OBJECT", "ENCODING", ks.active) == b"listpack"
    batch = await jobs.claim(conn, queue, 30_000, count=8)
    assert await conn.execute("OBJECT", "ENCODING", ks.active) == b"skiplist"
    held = sorted(i.encode() for i in ids[:9])
    assert [first.id, *(c.id for c in batch)] == ids[:9]
    assert sorted(await conn.execute("ZRANGE", ks.active, 0, -1)) == held
    # a listpack active with leases in it (as a queue from before holds it)
    leases = await conn.execute("ZRANGE", ks.active, 0, -1, "WITHSCORES")
    await conn.execute("DEL", ks.active)
    await conn.execute(
        "ZADD",
        ks.active,
        *[x for pair in zip(leases[1::2], leases[::2], strict=True) for x in pair],
    )
    assert await conn.execute("OBJECT", "ENCODING", ks.active) == b"listpack"
    rest = await jobs.claim(conn, queue, 30_000, count=8)
    assert [c.id for c in rest] == ids[9:]
    assert await conn.execute("OBJECT", "ENCODING", ks.active) == b"skiplist"
    assert sorted(await conn.execute("ZRANGE", ks.active, 0, -1)) == sorted(i.encode() for i in ids)
    assert (
        await conn.execute("ZSCORE", ks.active, first.id)
        == leases[leases.index(first.id.encode()) + 1]
    )
