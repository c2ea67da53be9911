"""After Redis lost its data (a FLUSHALL, a restart without persistence), ``result()`` of a
job enqueued before says so: the job has no row and its queue has no meta hash, which
no retention explains. A row gone from a queue that still exists keeps the retention
message."""

from __future__ import annotations

import asyncio

import pytest
import trio

import echomq
from echomq._scripts.keyspace import Keyspace
from echomq.errors import JobGone
from echomq.testing import RedisServer


def _queue(name: str, url: str) -> echomq.Queue:
    q = echomq.Queue(name, url=url)

    @q.task(name="later")
    async def later() -> None:
        return None

    return q


async def test_result_after_a_flushall_names_the_data_loss_not_retention(queue: str) -> None:
    with RedisServer() as server:
        q = _queue(queue, server.url)
        async with q.open():
            kept = await q.tasks["later"].apply(delay=3600)
            lost = await q.tasks["later"].apply(delay=3600)
            # a row gone while the queue stays (as its TTL would end it): retention
            await q.connection.execute("DEL", Keyspace(queue).job(kept.id))
            with trio.fail_after(10), pytest.raises(JobGone, match="retention") as gone:
                await kept.result()
            assert "lost the queue's data" not in str(gone.value)
            await q.connection.execute("FLUSHALL")
            with trio.fail_after(10), pytest.raises(JobGone, match="lost the queue's data"):
                await lost.result()

        def blocking() -> None:  # the blocking twin
            with pytest.raises(JobGone, match="lost the queue's data"):
                lost.result_sync(timeout=10)

        await trio.to_thread.run_sync(blocking)

        async def in_asyncio() -> None:  # the asyncio twin
            async with q.aopen():
                with pytest.raises(JobGone, match="no meta hash"):
                    await lost.aresult(timeout=10)

        await trio.to_thread.run_sync(asyncio.run, in_asyncio())
