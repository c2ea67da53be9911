"""The queue's concurrency (docs/lanes.md): at most N jobs of the queue in active across
every worker, enforced by the claim; a claim at the cap writes nothing and answers "nothing
known" (a finish wakes a consumer); recovery gives a dead holder's room back."""

from __future__ import annotations

import echomq
from echomq import admin, jobs
from echomq._scripts.keyspace import Keyspace
from echomq.jobs.lifecycle import complete_held

from ._support import lapse


async def put(conn: echomq.Connection, queue: str, n: int, group: str | None = None) -> list[str]:
    return await jobs.enqueue_many(
        conn, queue, [jobs.NewJob(payload=f"p{i}", group=group) for i in range(n)]
    )


async def test_a_queue_at_its_concurrency_claims_nothing_and_writes_nothing(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_concurrency(conn, queue, 2)
    assert (await admin.limits(conn, queue)).concurrency == 2
    await put(conn, queue, 5)
    first = await jobs.claim_batch(conn, queue, 10_000, count=10)
    assert len(first.jobs) == 2
    assert first.next_due_ms is None  # at the cap: nothing known until a finish
    before = (await conn.execute("DUMP", ks.pending), await conn.execute("DUMP", ks.active))
    capped = await jobs.claim_batch(conn, queue, 10_000, count=10)
    assert capped.jobs == [] and capped.next_due_ms is None
    assert (await conn.execute("DUMP", ks.pending), await conn.execute("DUMP", ks.active)) == before
    # another claimer (another worker) is held to the same cap
    other = await jobs.claim_batch(conn, queue, 10_000, count=1, worker="w2")
    assert other.jobs == []


async def test_a_finish_wakes_a_consumer_while_the_queue_has_a_cap(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_concurrency(conn, queue, 1)
    await put(conn, queue, 3)
    (held,) = await jobs.claim(conn, queue, 10_000, count=5)
    await conn.execute("DEL", ks.wake)
    assert await jobs.claim(conn, queue, 10_000, count=5) == []
    await jobs.complete(conn, queue, held.id, held.token, b"r")
    assert await conn.execute("LLEN", ks.wake) == 1  # a consumer at the cap wakes
    (second,) = await jobs.claim(conn, queue, 10_000, count=5)
    await conn.execute("DEL", ks.wake)
    await complete_held(conn, queue, [second.id], [second.token], [b"r"])
    assert await conn.execute("LLEN", ks.wake) == 1  # the batch path too


async def test_a_queue_without_a_cap_pushes_no_wake_on_finish(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await put(conn, queue, 3)
    (held,) = await jobs.claim(conn, queue, 10_000, count=1)
    await conn.execute("DEL", ks.wake)
    await jobs.complete(conn, queue, held.id, held.token, b"r")
    assert await conn.execute("LLEN", ks.wake) == 0


async def test_recovery_gives_a_dead_holders_room_back(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_concurrency(conn, queue, 2)
    await put(conn, queue, 4)
    dead = (await jobs.claim_batch(conn, queue, 50, count=4, worker="gone")).jobs
    assert len(dead) == 2
    assert await jobs.claim(conn, queue, 10_000, count=4) == []
    await lapse(conn, ks, *(c.id for c in dead))
    await jobs.reap(conn, queue)
    again = await jobs.claim(conn, queue, 10_000, count=4)
    assert len(again) == 2


async def test_lowering_raising_and_clearing_the_cap(conn: echomq.Connection, queue: str) -> None:
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_concurrency(conn, queue, 3)
    await put(conn, queue, 8)
    held = await jobs.claim(conn, queue, 10_000, count=8)
    assert len(held) == 3
    await admin.set_concurrency(conn, queue, 1)  # lowered: running jobs go on, none start
    assert await jobs.claim(conn, queue, 10_000, count=8) == []
    for c in held[:2]:
        await jobs.complete(conn, queue, c.id, c.token, b"")
    assert await jobs.claim(conn, queue, 10_000, count=8) == []  # still at 1
    await admin.set_concurrency(conn, queue, 3)
    assert len(await jobs.claim(conn, queue, 10_000, count=8)) == 2
    await admin.set_concurrency(conn, queue, 0)  # 0 clears
    assert (await admin.limits(conn, queue)).concurrency is None
    assert len(await jobs.claim(conn, queue, 10_000, count=8)) == 3


async def test_the_cap_counts_grouped_jobs_too(conn: echomq.Connection, queue: str) -> None:
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_concurrency(conn, queue, 3)
    await put(conn, queue, 4, group="a")
    await put(conn, queue, 4, group="b")
    await put(conn, queue, 4)
    assert len(await jobs.claim(conn, queue, 10_000, count=20)) == 3
    assert await jobs.claim(conn, queue, 10_000, count=20) == []


async def test_explain_says_the_queue_is_at_its_cap(conn: echomq.Connection, queue: str) -> None:
    from echomq.cli.explain_text import facts, summary

    await admin.ensure_schema(conn, queue)
    await admin.set_concurrency(conn, queue, 1)
    ids = await put(conn, queue, 2)
    await jobs.claim(conn, queue, 10_000, count=2)
    e = await jobs.explain(conn, queue, ids[1])
    assert (e.concurrency, e.running) == (1, 1)
    assert summary(e).startswith("waiting: the queue at its concurrency of 1 (1 running")
    assert ("queue cap", "1 running at once, 1 running now") in facts(e)
