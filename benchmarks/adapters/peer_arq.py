"""arq: ``arq peer_arq.WorkerSettings`` (max_jobs = concurrency); results kept (arq's default)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import _common
import redis
from arq import create_pool
from arq.connections import RedisSettings

URL = os.environ.get("BENCH_URL", "redis://127.0.0.1:6379/0")


async def noop(ctx: Any, payload: str) -> str:
    return "ok"


class WorkerSettings:
    functions = [noop]  # noqa: RUF012 - arq reads class attributes
    redis_settings = RedisSettings.from_dsn(URL)
    max_jobs = int(os.environ.get("BENCH_CONCURRENCY", "100"))


def worker(args: Any) -> None:
    os.environ["BENCH_URL"], os.environ["BENCH_CONCURRENCY"] = args.url, str(args.concurrency)
    os.execvp("arq", ["arq", "peer_arq.WorkerSettings"])


class Client:
    sleep = staticmethod(asyncio.sleep)

    def __init__(self, args: Any) -> None:
        self.url = args.url

    async def open(self) -> None:
        self.pool = await create_pool(RedisSettings.from_dsn(self.url))
        self.sync = redis.Redis.from_url(self.url)

    async def enqueue_one(self) -> str:
        job = await self.pool.enqueue_job("noop", _common.PAYLOAD)
        return job.job_id

    async def enqueue_batch(self, k: int) -> list[str]:
        return list(await asyncio.gather(*(self.enqueue_one() for _ in range(k))))

    async def done(self, ids: list[str]) -> int:
        return _common.exists_count(self.sync, [f"arq:result:{i}" for i in ids])

    async def roundtrip(self) -> None:
        job = await self.pool.enqueue_job("noop", _common.PAYLOAD)
        await job.result(timeout=30, poll_delay=0.001)  # default poll_delay is 0.5 s

    async def close(self) -> None:
        await self.pool.aclose()
