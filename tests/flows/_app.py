"""A flow app for the tests: tasks that add, collect and fail."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio

import echomq
from _waits import until as _until
from echomq import Job


def make_app(queue: str, url: str) -> tuple[echomq.Queue, dict[str, Any]]:
    q = echomq.Queue(queue, url=url)
    ran: dict[str, int] = {}
    gate = trio.Event()
    tasks: dict[str, Any] = {"ran": ran, "gate": gate}

    def count(name: str) -> None:
        ran[name] = ran.get(name, 0) + 1

    @q.task(name="add")
    async def add(x: int, y: int = 0) -> int:
        count("add")
        return x + y

    @q.task(name="total")
    async def total(values: list[Any], extra: int = 0) -> int:
        count("total")
        return sum(v for v in values if isinstance(v, int)) + extra

    @q.task(name="boom")
    async def boom(*_: Any) -> None:
        count("boom")
        raise ValueError("boom")

    @q.task(name="slow")
    async def slow(x: int) -> int:
        count("slow")
        await gate.wait()
        return x

    @q.task(name="collect")
    async def collect(job: Job) -> list[Any]:
        count("collect")
        return [str(v) if isinstance(v, echomq.ChildFailure) else v for v in job.children_results()]

    tasks.update(add=add, total=total, boom=boom, slow=slow, collect=collect)
    return q, tasks


@asynccontextmanager
async def running(q: echomq.Queue, **options: Any) -> AsyncIterator[echomq.Worker]:
    worker = echomq.Worker(q, concurrency=8, **options)
    async with q.open(), trio.open_nursery() as nursery:
        await nursery.start(worker.serve)
        try:
            yield worker
        finally:
            worker.shutdown(grace=0)


async def until(check: Callable[[], bool | Awaitable[bool]], within: float = 10.0) -> None:
    """``_waits.until`` with a longer default bound: flows run many jobs through a worker."""
    await _until(check, within)
