"""The queue's concurrency across workers (docs/lanes.md): three workers of 16 slots each
under a cap of 5 never run more than 5 jobs at once, every job completes, and the cap can
be lowered and cleared while they serve."""

from __future__ import annotations

from contextlib import AsyncExitStack

import trio

import echomq
from echomq import admin
from echomq._scripts.keyspace import Keyspace

from ._runtime import serving


async def test_three_workers_of_16_slots_under_a_cap_of_5(redis_url: str, queue: str) -> None:
    q = echomq.Queue(queue, url=redis_url)
    ks = Keyspace(queue)
    running = [0]
    most = [0]  # the most jobs running at once (the jobs' own start and end)
    most_active = [0]  # the most ids in active, sampled through the run
    batch = [0]  # which batch the samples count for (a sample sent before it is dropped)

    @q.task
    async def work(n: int) -> int:
        running[0] += 1
        most[0] = max(most[0], running[0])
        await trio.sleep(0.02)
        running[0] -= 1
        return n

    async def sample(conn: echomq.Connection, task_status: trio.TaskStatus[None]) -> None:
        task_status.started()
        while True:
            sent_in = batch[0]
            n = int(await conn.execute("ZCARD", ks.active))
            if batch[0] == sent_in:
                most_active[0] = max(most_active[0], n)
            await trio.sleep(0.002)

    async def run_batch(n: int) -> tuple[int, int]:
        most[0] = most_active[0] = 0
        batch[0] += 1
        handles = [await work.delay(i) for i in range(n)]
        assert [await h.result(timeout=60) for h in handles] == list(range(n))
        return most[0], most_active[0]

    with trio.fail_after(120):
        async with q.open(), AsyncExitStack() as stack:
            await admin.ensure_schema(q.connection, queue)  # the queue exists first
            await admin.set_concurrency(q.connection, queue, 5)
            for _ in range(3):
                await stack.enter_async_context(serving(echomq.Worker(q, concurrency=16)))
            async with trio.open_nursery() as nursery:
                await nursery.start(sample, q.connection)
                capped = await run_batch(60)
                await admin.set_concurrency(q.connection, queue, 2)  # lowered at run time
                lowered = await run_batch(20)
                await admin.set_concurrency(q.connection, queue, 0)  # cleared
                cleared = await run_batch(60)
                nursery.cancel_scope.cancel()
    assert capped[0] <= 5 and capped[1] <= 5, capped
    assert capped[0] >= 2, capped  # the workers did run side by side
    assert lowered[0] <= 2 and lowered[1] <= 2, lowered
    assert cleared[0] > 5, cleared
