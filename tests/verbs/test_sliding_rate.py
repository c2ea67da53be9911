"""Sliding rate windows (docs/lanes.md): with ``kind="sliding"`` the claim counts the
starts of the last period, wherever it begins, so no stretch of one period holds more than
the limit (a fixed window lets twice the limit through across its edge)."""

from __future__ import annotations

import pytest

import echomq
from echomq import admin, jobs
from echomq._scripts.keyspace import Keyspace
from echomq.errors import InvalidArgument

from ._lanes import check_lanes, ring_of
from ._support import eventually, server_now_ms


async def put(conn: echomq.Connection, queue: str, group: str | None, n: int) -> list[str]:
    batch = [jobs.NewJob(payload=f"{group}-{i}", group=group) for i in range(n)]
    return await jobs.enqueue_many(conn, queue, batch)


def groups_of(claimed: list[echomq.Claimed]) -> list[str]:
    return [c.payload.decode().rsplit("-", 1)[0] for c in claimed]


def most_in_any_stretch(starts: list[int], period: int) -> int:
    """The most starts in any half-open stretch [s, s + period) of the server clock."""
    starts = sorted(starts)
    return max(sum(1 for t in starts[i:] if t < s + period) for i, s in enumerate(starts))


async def starts_of(conn: echomq.Connection, queue: str, ids: list[str]) -> list[int]:
    out = []
    for job_id in ids:
        info = await jobs.get_job(conn, queue, job_id)
        assert info is not None and info.claimed_at is not None
        out.append(info.claimed_at)
    return out


async def test_a_full_sliding_window_answers_when_its_oldest_start_leaves(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_rate_limit(conn, queue, 3, 60, kind="sliding")
    rate = (await admin.limits(conn, queue)).rate
    assert rate == admin.RateLimit(max_jobs=3, period_ms=60_000, kind="sliding")
    await put(conn, queue, None, 5)
    batch = await jobs.claim_batch(conn, queue, 10_000, count=10)
    assert len(batch.jobs) == 3
    assert batch.next_due_ms is not None and 59_000 < batch.next_due_ms <= 60_000
    before = await conn.execute("DUMP", ks.pending)
    limited = await jobs.claim_batch(conn, queue, 10_000, count=10)
    assert limited.jobs == [] and limited.next_due_ms is not None
    assert 0 < limited.next_due_ms <= batch.next_due_ms
    assert await conn.execute("DUMP", ks.pending) == before
    assert int(await conn.execute("ZCARD", ks.slide)) == 3
    assert 0 < int(await conn.execute("PTTL", ks.slide)) <= 60_000
    await admin.set_rate_limit(conn, queue, 3, 60)  # back to fixed: its own counter
    assert (await admin.limits(conn, queue)).rate == admin.RateLimit(max_jobs=3, period_ms=60_000)


async def test_no_stretch_of_one_period_holds_more_than_the_limit(
    conn: echomq.Connection, queue: str
) -> None:
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_rate_limit(conn, queue, 3, 0.2, kind="sliding")
    ids = await put(conn, queue, None, 12)
    taken: list[str] = []

    async def all_taken() -> bool:
        taken.extend(c.id for c in await jobs.claim(conn, queue, 10_000, count=2))
        return len(taken) == len(ids)

    await eventually(all_taken)
    starts = await starts_of(conn, queue, taken)
    assert most_in_any_stretch(starts, 200) <= 3
    assert max(starts) - min(starts) >= 3 * 200 - 1  # 12 starts take at least 3 periods
    assert int(await conn.execute("ZCARD", Keyspace(queue).slide)) <= 3  # trimmed as it went


async def test_a_groups_sliding_window_parks_it_and_the_others_go_on(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_rate_limit(conn, queue, 2, 60, group="a", kind="sliding")
    await put(conn, queue, "a", 5)
    await put(conn, queue, "b", 5)
    batch = await jobs.claim_batch(conn, queue, 10_000, count=10)
    assert sorted(groups_of(batch.jobs)) == ["a", "a"] + ["b"] * 5
    assert await ring_of(conn, ks) == []
    until = await conn.execute("ZSCORE", ks.limited, "a")
    assert until is not None and float(until) > await server_now_ms(conn) + 59_000
    assert int(await conn.execute("ZCARD", ks.group_slide("a"))) == 2
    row = await admin.group(conn, queue, "a")
    assert row.rate == admin.RateLimit(max_jobs=2, period_ms=60_000, kind="sliding")
    assert row.own_rate
    await check_lanes(conn, queue)


async def test_every_group_sliding_by_default(conn: echomq.Connection, queue: str) -> None:
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_rate_limit(conn, queue, 1, 60, every_group=True, kind="sliding")
    assert (await admin.limits(conn, queue)).group_rate == admin.RateLimit(
        max_jobs=1, period_ms=60_000, kind="sliding"
    )
    await put(conn, queue, "a", 2)
    await put(conn, queue, "b", 2)
    assert sorted(groups_of(await jobs.claim(conn, queue, 10_000, count=10))) == ["a", "b"]
    assert await jobs.claim(conn, queue, 10_000, count=10) == []
    assert (await admin.group(conn, queue, "b")).rate == admin.RateLimit(
        max_jobs=1, period_ms=60_000, kind="sliding"
    )
    await check_lanes(conn, queue)


async def test_a_bad_kind_is_refused_before_any_io(conn: echomq.Connection, queue: str) -> None:
    await admin.ensure_schema(conn, queue)  # the queue exists first
    with pytest.raises(InvalidArgument):
        await admin.set_rate_limit(conn, queue, 3, 1, kind="gcra")
    assert (await admin.limits(conn, queue)).rate is None


async def test_explain_reads_a_sliding_window(conn: echomq.Connection, queue: str) -> None:
    from echomq.cli.explain_text import summary

    await admin.ensure_schema(conn, queue)
    await admin.set_rate_limit(conn, queue, 2, 60, kind="sliding")
    ids = await put(conn, queue, None, 3)
    await jobs.claim(conn, queue, 10_000, count=3)
    e = await jobs.explain(conn, queue, ids[2])
    assert e.queue_rate is not None and e.queue_rate.used == 2
    assert e.queue_rate.reopens_in_ms is not None and 59_000 < e.queue_rate.reopens_in_ms <= 60_000
    assert summary(e).startswith("waiting: the queue at its rate limit of 2 per 1 min 0 s")
