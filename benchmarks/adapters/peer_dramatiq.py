"""dramatiq: ``dramatiq peer_dramatiq --processes 1 --threads 100``; RedisBroker with the
Results middleware (RedisBackend) so a result can be awaited."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import _common
import dramatiq
import redis
from dramatiq.brokers.redis import RedisBroker
from dramatiq.results import Results
from dramatiq.results.backends import RedisBackend

URL = os.environ.get("BENCH_URL", "redis://127.0.0.1:6379/0")
backend = RedisBackend(url=URL)
broker = RedisBroker(url=URL)
broker.add_middleware(Results(backend=backend))
dramatiq.set_broker(broker)


@dramatiq.actor(store_results=True, queue_name="bench")
def noop(payload: str) -> str:
    return "ok"


def worker(args: Any) -> None:
    os.environ["BENCH_URL"] = args.url
    os.execvp(
        "dramatiq",
        ["dramatiq", "peer_dramatiq", "--processes", "1", "--threads", str(args.concurrency)],
    )


class Client:
    sleep = staticmethod(asyncio.sleep)

    def __init__(self, args: Any) -> None:
        self.sync = redis.Redis.from_url(args.url)
        self.messages: dict[str, Any] = {}

    async def open(self) -> None:
        pass

    async def enqueue_one(self) -> str:
        message = noop.send(_common.PAYLOAD)
        key = backend.build_message_key(message)
        return str(key)

    async def enqueue_batch(self, k: int) -> list[str]:
        return [await self.enqueue_one() for _ in range(k)]

    async def done(self, ids: list[str]) -> int:
        return _common.exists_count(self.sync, ids)

    async def roundtrip(self) -> None:
        noop.send(_common.PAYLOAD).get_result(block=True, timeout=30_000)

    async def close(self) -> None:
        broker.close()
