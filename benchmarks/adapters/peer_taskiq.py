"""taskiq + taskiq-redis: ``taskiq worker peer_taskiq:broker --workers 1 --max-async-tasks 100``;
RedisStreamBroker (acknowledged delivery) with RedisAsyncResultBackend."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import _common
import redis
from taskiq_redis import RedisAsyncResultBackend, RedisStreamBroker

URL = os.environ.get("BENCH_URL", "redis://127.0.0.1:6379/0")
broker = RedisStreamBroker(URL).with_result_backend(RedisAsyncResultBackend(URL))


@broker.task(task_name="noop")
async def noop(payload: str) -> str:
    return "ok"


def worker(args: Any) -> None:
    os.environ["BENCH_URL"] = args.url
    os.execvp(
        "taskiq",
        [
            "taskiq",
            "worker",
            "peer_taskiq:broker",
            "--workers",
            "1",
            "--max-async-tasks",
            str(args.concurrency),
            "--log-level",
            "WARNING",
        ],
    )


class Client:
    sleep = staticmethod(asyncio.sleep)

    def __init__(self, args: Any) -> None:
        self.sync = redis.Redis.from_url(args.url)

    async def open(self) -> None:
        await broker.startup()

    async def enqueue_one(self) -> str:
        return (await noop.kiq(_common.PAYLOAD)).task_id

    async def enqueue_batch(self, k: int) -> list[str]:
        return list(await asyncio.gather(*(self.enqueue_one() for _ in range(k))))

    async def done(self, ids: list[str]) -> int:
        return _common.exists_count(self.sync, ids)

    async def roundtrip(self) -> None:
        task = await noop.kiq(_common.PAYLOAD)
        await task.wait_result(check_interval=0.001, timeout=30)  # default interval: 0.2 s

    async def close(self) -> None:
        await broker.shutdown()
