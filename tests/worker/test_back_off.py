"""``raise echomq.RateLimited(retry_after=...)`` in a task (docs/lanes.md): against a fake
API that answers 429 for a while, the job backs off without counting a failure, only its
group pauses (the others keep being served), and the job later completes."""

from __future__ import annotations

from datetime import timedelta

import trio

import echomq
from echomq import jobs

from ._runtime import serving


async def test_a_429_pauses_only_that_group_and_the_job_completes_with_no_failure(
    redis_url: str, queue: str
) -> None:
    q = echomq.Queue(queue, url=redis_url)
    calls = {"acme": 0}
    refused = 2  # the fake API answers 429 to acme's first two calls
    done: dict[str, float] = {}  # payload -> trio time it completed
    blocked_at: list[float] = []  # trio time of each 429

    async def fake_api(customer: str) -> int:
        if customer == "acme":
            calls["acme"] += 1
            if calls["acme"] <= refused:
                return 429
        return 200

    @q.task(group=lambda customer, n: customer)
    async def call(customer: str, n: int) -> str:
        if await fake_api(customer) == 429:
            blocked_at.append(trio.current_time())
            raise echomq.RateLimited(retry_after=timedelta(milliseconds=400))
        done[f"{customer}-{n}"] = trio.current_time()
        return f"{customer}-{n}"

    with trio.fail_after(30):
        async with q.open():
            acme = await call.delay("acme", 0)
            others = [await call.delay(c, n) for n in range(4) for c in ("bob", "cy")]
            async with serving(echomq.Worker(q, concurrency=4)):
                assert await acme.result(timeout=20) == "acme-0"
                for h in others:
                    await h.result(timeout=20)
            info = await jobs.get_job(q.connection, queue, acme.id)
    assert info is not None and info.failures == 0 and info.state == "completed"
    assert len(blocked_at) == refused
    # the others were served while acme was blocked: all done before acme's job
    assert all(done[f"{c}-{n}"] < done["acme-0"] for n in range(4) for c in ("bob", "cy"))
    # acme waited out each back-off (on the server clock; trio's is close enough here)
    assert blocked_at[1] - blocked_at[0] >= 0.3
    assert done["acme-0"] - blocked_at[1] >= 0.3


async def test_an_ungrouped_429_blocks_the_queue_for_retry_after(
    redis_url: str, queue: str
) -> None:
    q = echomq.Queue(queue, url=redis_url)
    seen: list[tuple[str, float]] = []
    first = [True]
    limited = trio.Event()

    @q.task
    async def work(n: int) -> int:
        if first[0]:
            first[0] = False
            seen.append(("429", trio.current_time()))
            limited.set()
            raise echomq.RateLimited(retry_after=0.4)
        seen.append((str(n), trio.current_time()))
        return n

    with trio.fail_after(30):
        async with q.open():
            a = await work.delay(0)
            async with serving(echomq.Worker(q, concurrency=1)):
                await limited.wait()
                b = await work.delay(1)  # enqueued while the queue is blocked
                assert await b.result(timeout=20) == 1
                assert await a.result(timeout=20) == 0
            info = await jobs.get_job(q.connection, queue, a.id)
    assert info is not None and info.failures == 0
    assert seen[1][1] - seen[0][1] >= 0.3  # nothing ran during the block


async def test_a_retry_after_that_cannot_be_scheduled_makes_the_job_dead(
    redis_url: str, queue: str
) -> None:
    q = echomq.Queue(queue, url=redis_url)

    @q.task
    async def bad() -> None:
        raise echomq.RateLimited(retry_after=-1)

    with trio.fail_after(30):
        async with q.open(), serving(echomq.Worker(q, concurrency=1)):
            h = await bad.delay()
            try:
                await h.result(timeout=20)
            except echomq.JobFailed as exc:
                assert "RateLimited" in str(exc) and "not retried" in str(exc)
            else:
                raise AssertionError("the job completed")
