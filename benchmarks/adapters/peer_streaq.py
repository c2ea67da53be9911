"""streaq: ``streaq run peer_streaq:worker`` (Worker(concurrency=100)); results kept."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import _common
import redis
from streaq import Worker

URL = os.environ.get("BENCH_URL", "redis://127.0.0.1:6379/0")
worker_app = Worker(redis_url=URL, concurrency=int(os.environ.get("BENCH_CONCURRENCY", "100")))


@worker_app.task
async def noop(payload: str) -> str:
    return "ok"


def worker(args: Any) -> None:
    os.environ["BENCH_URL"], os.environ["BENCH_CONCURRENCY"] = args.url, str(args.concurrency)
    os.execvp("streaq", ["streaq", "run", "peer_streaq:worker_app"])


class Client:
    sleep = staticmethod(asyncio.sleep)

    def __init__(self, args: Any) -> None:
        self.sync = redis.Redis.from_url(args.url)

    async def open(self) -> None:
        self.ctx = worker_app.__asynccontextmanager__()
        await self.ctx.__aenter__()

    async def enqueue_one(self) -> str:
        return (await noop.enqueue(_common.PAYLOAD)).id

    async def enqueue_batch(self, k: int) -> list[str]:
        return list(await asyncio.gather(*(self.enqueue_one() for _ in range(k))))

    async def enqueue_bulk(self, k: int) -> list[str]:
        tasks = [noop.enqueue(_common.PAYLOAD) for _ in range(k)]  # not awaited: batched below
        await worker_app.enqueue_many(tasks)
        return [t.id for t in tasks]

    async def done(self, ids: list[str]) -> int:
        return _common.exists_count(self.sync, [worker_app.results_key + i for i in ids])

    async def roundtrip(self) -> None:
        task = await noop.enqueue(_common.PAYLOAD)
        await task.result(timeout=30)

    async def close(self) -> None:
        await self.ctx.__aexit__(None, None, None)
