"""rq: ``rq worker-pool -n 2`` (rq runs one job at a time per worker process, so its
concurrency is its process count: one per core here, not 100); results kept (rq's default)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import _common
import redis
from rq import Queue


def noop(payload: str) -> str:
    return "ok"


def worker(args: Any) -> None:
    procs = os.environ.get("BENCH_RQ_PROCESSES", "2")
    os.execvp("rq", ["rq", "worker-pool", "-n", procs, "-u", args.url, "-q", "bench"])


class Client:
    sleep = staticmethod(asyncio.sleep)

    def __init__(self, args: Any) -> None:
        self.conn = redis.Redis.from_url(args.url)
        self.queue = Queue("bench", connection=self.conn)

    async def open(self) -> None:
        pass

    async def enqueue_one(self) -> str:
        return str(self.queue.enqueue(noop, _common.PAYLOAD).id)

    async def enqueue_batch(self, k: int) -> list[str]:
        return [await self.enqueue_one() for _ in range(k)]

    async def done(self, ids: list[str]) -> int:
        return _common.exists_count(self.conn, [f"rq:results:{i}" for i in ids])

    async def roundtrip(self) -> None:
        job = self.queue.enqueue(noop, _common.PAYLOAD)
        if job.latest_result(timeout=30) is None:
            raise TimeoutError("no result")

    async def close(self) -> None:
        self.conn.close()
