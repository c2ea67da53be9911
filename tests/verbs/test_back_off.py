"""An in-task back-off (docs/lanes.md): ``rate_limited`` puts a held job back on the
schedule without counting a failure, and blocks its group (a grouped job) or else its
queue until then; the claim answers the ms until the block ends."""

from __future__ import annotations

import pytest

import echomq
from echomq import jobs
from echomq._scripts.keyspace import Keyspace
from echomq.errors import StaleToken

from ._lanes import check_lanes, ring_of
from ._support import eventually, server_now_ms


async def put(conn: echomq.Connection, queue: str, group: str | None, n: int) -> list[str]:
    batch = [jobs.NewJob(payload=f"{group}-{i}", group=group) for i in range(n)]
    return await jobs.enqueue_many(conn, queue, batch)


def groups_of(claimed: list[echomq.Claimed]) -> list[str]:
    return [c.payload.decode().rsplit("-", 1)[0] for c in claimed]


async def test_an_ungrouped_back_off_blocks_the_queue_and_counts_no_failure(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    (job_id,) = await put(conn, queue, None, 1)
    await put(conn, queue, None, 3)
    (held,) = await jobs.claim(conn, queue, 10_000, count=1)
    assert held.id == job_id
    until = await jobs.rate_limited(conn, queue, held.id, held.token, 60_000)
    assert until > await server_now_ms(conn)
    info = await jobs.get_job(conn, queue, job_id)
    assert info is not None and info.state == "scheduled" and info.failures == 0
    assert await conn.execute("ZSCORE", ks.active, job_id) is None
    before = await conn.execute("DUMP", ks.pending)
    blocked = await jobs.claim_batch(conn, queue, 10_000, count=10)
    assert blocked.jobs == [] and blocked.next_due_ms is not None
    assert 55_000 < blocked.next_due_ms <= 60_000
    assert await conn.execute("DUMP", ks.pending) == before
    # a stale holder cannot back off
    with pytest.raises(StaleToken):
        await jobs.rate_limited(conn, queue, held.id, held.token + 5, 1000)


async def test_the_queue_reopens_when_the_back_off_ends(
    conn: echomq.Connection, queue: str
) -> None:
    (job_id,) = await put(conn, queue, None, 1)
    (held,) = await jobs.claim(conn, queue, 10_000)
    await jobs.rate_limited(conn, queue, held.id, held.token, 100)

    async def claimed_again() -> list[echomq.Claimed]:
        return await jobs.claim(conn, queue, 10_000)

    (again,) = await eventually(claimed_again)
    assert again.id == job_id and again.token == held.token + 1 and again.failures == 0


async def test_a_grouped_back_off_pauses_only_its_group(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    await put(conn, queue, "a", 3)
    await put(conn, queue, "b", 3)
    await put(conn, queue, None, 2)
    first = await jobs.claim(conn, queue, 10_000, count=1)
    assert groups_of(first) == ["a"]
    await jobs.rate_limited(conn, queue, first[0].id, first[0].token, 60_000)
    assert "a" not in await ring_of(conn, ks)
    limited = await conn.execute("ZSCORE", ks.limited, "a")
    assert limited is not None and float(limited) > await server_now_ms(conn)
    rest = await jobs.claim_batch(conn, queue, 10_000, count=20)
    assert sorted(groups_of(rest.jobs)) == ["None", "None", "b", "b", "b"]
    assert rest.next_due_ms is not None and 55_000 < rest.next_due_ms <= 60_000
    info = await jobs.get_job(conn, queue, first[0].id)
    assert info is not None and info.state == "scheduled" and info.failures == 0
    await check_lanes(conn, queue)


async def test_a_grouped_back_off_ends_and_the_group_is_served_again(
    conn: echomq.Connection, queue: str
) -> None:
    ids = await put(conn, queue, "a", 2)
    (held,) = await jobs.claim(conn, queue, 10_000, count=1)
    await jobs.rate_limited(conn, queue, held.id, held.token, 100)
    assert await jobs.claim(conn, queue, 10_000, count=5) == []
    got: list[str] = []

    async def both() -> bool:
        got.extend(c.id for c in await jobs.claim(conn, queue, 10_000, count=5))
        return len(got) == 2

    await eventually(both)
    assert sorted(got) == sorted(ids)
    await check_lanes(conn, queue)


async def test_explain_says_the_queue_backs_off(conn: echomq.Connection, queue: str) -> None:
    from echomq.cli.explain_text import summary

    ids = await put(conn, queue, None, 2)
    (held,) = await jobs.claim(conn, queue, 10_000)
    await jobs.rate_limited(conn, queue, held.id, held.token, 60_000)
    e = await jobs.explain(conn, queue, ids[1])
    assert e.blocked_until_ms is not None and e.blocked_until_ms > e.now_ms
    assert summary(e).startswith("waiting: the queue backs off (a task raised RateLimited")
