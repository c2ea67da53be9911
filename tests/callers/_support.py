"""A queue with a few tasks, and a trio worker serving it while asyncio or blocking code
runs in a thread (an asyncio loop and trio cannot share a thread)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

import echomq


def make_queue(name: str, url: str) -> echomq.Queue:
    q = echomq.Queue(name, url=url)

    @q.task(name="add")
    async def add(a: int, b: int) -> int:
        return a + b

    @q.task(name="boom")
    async def boom() -> None:
        raise ValueError("no luck")

    @q.task(name="wait")
    async def wait(seconds: float) -> str:
        await trio.sleep(seconds)
        return "waited"

    return q


@asynccontextmanager
async def serving(q: echomq.Queue) -> AsyncIterator[echomq.Worker]:
    """A worker serving ``q`` for the block (cancelled at its end)."""
    worker = echomq.Worker(q, concurrency=8, grace=0)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.serve)
        yield worker
        nursery.cancel_scope.cancel()
