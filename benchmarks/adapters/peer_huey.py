"""huey: ``huey_consumer peer_huey.huey -w 100 -k thread``; RedisHuey with
``notify_result=True`` (huey's BLPOP result notification; without it ``get(blocking=True)``
polls from 50 ms up)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import _common
import redis
from huey import RedisHuey

URL = os.environ.get("BENCH_URL", "redis://127.0.0.1:6379/0")
huey = RedisHuey("bench", url=URL, notify_result=True)


@huey.task(name="noop")
def noop(payload: str) -> str:
    return "ok"


def worker(args: Any) -> None:
    os.environ["BENCH_URL"] = args.url
    os.execvp(
        "huey_consumer",
        ["huey_consumer", "peer_huey.huey", "-w", str(args.concurrency), "-k", "thread", "-q"],
    )


class Client:
    sleep = staticmethod(asyncio.sleep)

    def __init__(self, args: Any) -> None:
        self.sync = redis.Redis.from_url(args.url)

    async def open(self) -> None:
        pass

    async def enqueue_one(self) -> str:
        return str(noop(_common.PAYLOAD).id)

    async def enqueue_batch(self, k: int) -> list[str]:
        return [await self.enqueue_one() for _ in range(k)]

    async def done(self, ids: list[str]) -> int:
        pipe = self.sync.pipeline(transaction=False)
        for i in ids:
            pipe.hexists("huey.results.bench", i)
        return sum(bool(x) for x in pipe.execute())

    async def roundtrip(self) -> None:
        noop(_common.PAYLOAD).get(blocking=True, timeout=30)

    async def close(self) -> None:
        self.sync.close()
