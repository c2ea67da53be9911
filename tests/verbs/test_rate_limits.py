"""Rate limits (docs/lanes.md): at most N jobs started per period, for the queue and for
groups, enforced by the claim on the server clock; a limited claim answers when its window
reopens instead of letting a consumer spin."""

from __future__ import annotations

import echomq
from echomq import admin, jobs
from echomq._scripts.keyspace import Keyspace

from ._lanes import check_lanes, ring_of
from ._support import eventually, server_now_ms


async def put(conn: echomq.Connection, queue: str, group: str | None, n: int) -> list[str]:
    batch = [jobs.NewJob(payload=f"{group}-{i}", group=group) for i in range(n)]
    return await jobs.enqueue_many(conn, queue, batch)


def groups_of(claimed: list[echomq.Claimed]) -> list[str]:
    return [c.payload.decode().rsplit("-", 1)[0] for c in claimed]


async def after(conn: echomq.Connection, ms: int) -> None:
    """Wait (bounded) until the server clock is ``ms`` past now."""
    target = await server_now_ms(conn) + ms

    async def passed() -> bool:
        return await server_now_ms(conn) > target

    await eventually(passed)


async def test_a_queue_at_its_rate_answers_when_the_window_reopens(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """3 per minute: the claim takes 3 and then answers no job and the ms until the window
    ends, writing nothing."""
    from echomq.cli.explain_text import summary

    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_rate_limit(conn, queue, 3, 60)
    ids = await put(conn, queue, None, 5)
    batch = await jobs.claim_batch(conn, queue, 10_000, count=10)
    assert len(batch.jobs) == 3
    assert batch.next_due_ms is not None and 0 < batch.next_due_ms <= 60_000
    before = await conn.execute("DUMP", ks.pending)
    limited = await jobs.claim_batch(conn, queue, 10_000, count=10)
    assert limited.jobs == [] and limited.next_due_ms is not None
    assert 0 < limited.next_due_ms <= batch.next_due_ms
    assert await conn.execute("DUMP", ks.pending) == before
    e = await jobs.explain(conn, queue, ids[3])
    assert summary(e).startswith("waiting: the queue at its rate limit of 3 per 1 min 0 s")
    assert (await admin.limits(conn, queue)).rate == admin.RateLimit(max_jobs=3, period_ms=60_000)


async def test_the_window_reopens_on_the_server_clock(conn: echomq.Connection, queue: str) -> None:
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_rate_limit(conn, queue, 2, 0.05)
    await put(conn, queue, None, 5)
    assert len(await jobs.claim(conn, queue, 10_000, count=10)) == 2
    limited = await jobs.claim_batch(conn, queue, 10_000, count=10)
    if limited.jobs:  # the window turned between the two claims
        assert len(limited.jobs) <= 2
    else:
        assert limited.next_due_ms is not None and limited.next_due_ms <= 50
        await after(conn, limited.next_due_ms)
        assert len(await jobs.claim(conn, queue, 10_000, count=10)) == 2


async def test_clearing_the_rate_lets_claims_take_everything(
    conn: echomq.Connection, queue: str
) -> None:
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_rate_limit(conn, queue, 1, 60)
    await put(conn, queue, None, 4)
    assert len(await jobs.claim(conn, queue, 10_000, count=10)) == 1
    await admin.set_rate_limit(conn, queue, None)
    assert len(await jobs.claim(conn, queue, 10_000, count=10)) == 3
    assert (await admin.limits(conn, queue)).rate is None


async def test_a_group_at_its_rate_waits_and_the_others_go_on(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A group past its window leaves the ring for glimited (until the window ends); the
    other groups keep their turns; the claim tells how long until it reopens."""
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_rate_limit(conn, queue, 2, 60, group="a")
    await put(conn, queue, "a", 5)
    await put(conn, queue, "b", 5)
    batch = await jobs.claim_batch(conn, queue, 10_000, count=10)
    assert sorted(groups_of(batch.jobs)) == ["a", "a"] + ["b"] * 5
    assert await ring_of(conn, ks) == []
    until = await conn.execute("ZSCORE", ks.limited, "a")
    assert until is not None and float(until) > await server_now_ms(conn)
    assert batch.next_due_ms is not None and 0 < batch.next_due_ms <= 60_000
    await check_lanes(conn, queue)


async def test_a_group_window_reopens_and_the_group_rejoins(
    conn: echomq.Connection, queue: str
) -> None:
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_rate_limit(conn, queue, 1, 0.05, every_group=True)
    await put(conn, queue, "a", 3)
    await put(conn, queue, "b", 3)
    assert sorted(groups_of(await jobs.claim(conn, queue, 10_000, count=10))) == ["a", "b"]
    batch = await jobs.claim_batch(conn, queue, 10_000, count=10)
    if not batch.jobs:
        assert batch.next_due_ms is not None
        await after(conn, batch.next_due_ms)
        batch = await jobs.claim_batch(conn, queue, 10_000, count=10)
    assert sorted(groups_of(batch.jobs)) == ["a", "b"]
    await check_lanes(conn, queue)


async def test_raising_a_group_rate_lets_it_start_at_once(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_rate_limit(conn, queue, 2, 60, group="a")
    await put(conn, queue, "a", 5)
    assert len(await jobs.claim(conn, queue, 10_000, count=10)) == 2
    await admin.set_rate_limit(conn, queue, 4, 60, group="a")
    assert await conn.execute("ZSCORE", ks.limited, "a") is None
    assert len(await jobs.claim(conn, queue, 10_000, count=10)) == 2  # 4 in this window
    assert (await admin.group(conn, queue, "a")).rate == admin.RateLimit(
        max_jobs=4, period_ms=60_000
    )
    await check_lanes(conn, queue)


async def test_queue_and_group_rates_both_hold(conn: echomq.Connection, queue: str) -> None:
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_rate_limit(conn, queue, 3, 60)
    await admin.set_rate_limit(conn, queue, 1, 60, every_group=True)
    await put(conn, queue, "a", 3)
    await put(conn, queue, "b", 3)
    await put(conn, queue, None, 3)
    claimed = await jobs.claim(conn, queue, 10_000, count=10)
    assert sorted(groups_of(claimed)) == ["None", "a", "b"]
    assert await jobs.claim(conn, queue, 10_000, count=10) == []
    await check_lanes(conn, queue)


async def test_a_window_counter_expires_at_its_last_ms(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """The queue's and a group's counters end with their window: set to expire at its last
    ms, so a claim in the very ms the window ends (a waiting consumer wakes then) finds the
    next window empty, not the old count."""
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_rate_limit(conn, queue, 5, 60)
    await admin.set_rate_limit(conn, queue, 2, 7, group="a")
    await put(conn, queue, "a", 3)
    await put(conn, queue, None, 1)
    assert len(await jobs.claim(conn, queue, 10_000, count=10)) == 3
    for key, period in ((ks.rate, 60_000), (ks.group_rate("a"), 7_000)):
        expires = int(await conn.execute("PEXPIRETIME", key))
        assert (expires + 1) % period == 0, (key, expires)
    assert int(await conn.execute("GET", ks.rate)) == 3
    assert int(await conn.execute("GET", ks.group_rate("a"))) == 2
