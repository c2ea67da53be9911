"""A worker serving group lanes and rate limits (docs/lanes.md): a callable picks each
job's group from its arguments, a group's limit holds across the worker's slots, and a
rate-limited worker sleeps until its window reopens instead of claiming in a loop."""

from __future__ import annotations

from collections import Counter

import trio

import echomq
from echomq import admin, jobs

from ._runtime import serving


async def test_a_group_limit_holds_across_the_workers_slots(redis_url: str, queue: str) -> None:
    """group_concurrency=1: one job per customer at a time, customers side by side."""
    q = echomq.Queue(queue, url=redis_url)
    running: Counter[str] = Counter()
    most: Counter[str] = Counter()
    overlap = [0]

    @q.task(group=lambda customer, n: customer, group_concurrency=1)
    async def work(customer: str, n: int) -> int:
        running[customer] += 1
        most[customer] = max(most[customer], running[customer])
        overlap[0] = max(overlap[0], sum(running.values()))
        await trio.sleep(0.01)
        running[customer] -= 1
        return n

    with trio.fail_after(20):
        async with q.open(), serving(echomq.Worker(q, concurrency=8)):
            handles = [await work.delay(c, n) for n in range(4) for c in ("acme", "bob", "cy")]
            assert [await h.result(timeout=15) for h in handles] == [
                n for n in range(4) for _ in range(3)
            ]
            info = await handles[0].info()
    assert info is not None and info.group == "acme"
    assert most == {"acme": 1, "bob": 1, "cy": 1}
    assert overlap[0] > 1


async def test_a_rate_limited_worker_sleeps_until_the_window_reopens(
    redis_url: str, queue: str
) -> None:
    """2 starts per 300 ms: no window holds more, and the worker claims a few times per
    window (it waits for the window, it does not poll)."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task
    async def noop(n: int) -> int:
        return n

    with trio.fail_after(20):
        async with q.open():
            await admin.ensure_schema(q.connection, queue)  # the queue exists first
            await admin.set_rate_limit(q.connection, queue, 2, 0.3)
            handles = [await noop.delay(n) for n in range(6)]
            worker = echomq.Worker(q, concurrency=8)
            async with serving(worker):
                for h in handles:
                    await h.result(timeout=15)
                claims = worker.statistics().claims
            starts = [
                info.claimed_at
                for h in handles
                if (info := await jobs.get_job(q.connection, queue, h.id)) is not None
                and info.claimed_at is not None
            ]
    per_window = Counter(ms // 300 for ms in starts)
    assert len(starts) == 6 and max(per_window.values()) <= 2
    assert claims <= 16, claims


async def test_a_sliding_window_holds_over_every_stretch_across_three_workers(
    redis_url: str, queue: str
) -> None:
    """10 starts per 300 ms, sliding, served by 3 workers: no 300 ms stretch of the server
    clock, wherever it begins, holds more than 10 starts."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task
    async def noop(n: int) -> int:
        return n

    with trio.fail_after(60):
        async with q.open():
            await admin.ensure_schema(q.connection, queue)  # the queue exists first
            await admin.set_rate_limit(q.connection, queue, 10, 0.3, kind="sliding")
            handles = [await noop.delay(n) for n in range(50)]
            async with (
                serving(echomq.Worker(q, concurrency=16)),
                serving(echomq.Worker(q, concurrency=16)),
                serving(echomq.Worker(q, concurrency=16)),
            ):
                for h in handles:
                    await h.result(timeout=30)
            starts = [
                info.claimed_at
                for h in handles
                if (info := await jobs.get_job(q.connection, queue, h.id)) is not None
                and info.claimed_at is not None
            ]
    starts.sort()
    assert len(starts) == 50
    most = max(sum(1 for t in starts[i:] if t < s + 300) for i, s in enumerate(starts))
    assert most <= 10, most
