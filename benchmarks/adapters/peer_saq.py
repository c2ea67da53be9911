"""saq: ``saq peer_saq.settings`` (concurrency in settings); ``queue.apply`` for a result."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import _common
from saq import Queue

URL = os.environ.get("BENCH_URL", "redis://127.0.0.1:6379/0")


async def noop(ctx: Any, *, payload: str) -> str:
    return "ok"


settings = {
    "queue": Queue.from_url(URL),
    "functions": [noop],
    "concurrency": int(os.environ.get("BENCH_CONCURRENCY", "100")),
}


def worker(args: Any) -> None:
    os.environ["BENCH_URL"], os.environ["BENCH_CONCURRENCY"] = args.url, str(args.concurrency)
    os.execvp("saq", ["saq", "peer_saq.settings"])


class Client:
    sleep = staticmethod(asyncio.sleep)

    def __init__(self, args: Any) -> None:
        self.queue = Queue.from_url(args.url)

    async def open(self) -> None:
        await self.queue.connect()

    async def enqueue_one(self) -> str:
        job = await self.queue.enqueue("noop", payload=_common.PAYLOAD)
        assert job is not None
        return job.key

    async def enqueue_batch(self, k: int) -> list[str]:
        return list(await asyncio.gather(*(self.enqueue_one() for _ in range(k))))

    async def count_done(self, ids: list[str]) -> int:
        return len(ids) - await self.queue.count("incomplete")

    async def done(self, ids: list[str]) -> int:
        incomplete = await self.queue.count("incomplete")
        return len(ids) if incomplete == 0 else 0

    async def roundtrip(self) -> None:
        await self.queue.apply("noop", payload=_common.PAYLOAD, timeout=30)

    async def close(self) -> None:
        await self.queue.disconnect()
