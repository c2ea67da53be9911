"""celery: ``celery -A peer_celery worker --pool threads --concurrency 100``; Redis broker and
Redis result backend (so ``.get()`` works, as echomq's ``handle.result()`` does)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import _common
import redis
from celery import Celery

URL = os.environ.get("BENCH_URL", "redis://127.0.0.1:6379/0")
app = Celery("peer_celery", broker=URL, backend=URL)


@app.task(name="noop")
def noop(payload: str) -> str:
    return "ok"


def worker(args: Any) -> None:
    os.environ["BENCH_URL"] = args.url
    os.execvp(
        "celery",
        [
            "celery",
            "-A",
            "peer_celery",
            "worker",
            "--pool",
            "threads",
            "--concurrency",
            str(args.concurrency),
            "--loglevel",
            "WARNING",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
    )


class Client:
    sleep = staticmethod(asyncio.sleep)

    def __init__(self, args: Any) -> None:
        app.conf.broker_url = app.conf.result_backend = args.url
        self.sync = redis.Redis.from_url(args.url)

    async def open(self) -> None:
        pass

    async def enqueue_one(self) -> str:
        return str(noop.delay(_common.PAYLOAD).id)

    async def enqueue_batch(self, k: int) -> list[str]:
        return [await self.enqueue_one() for _ in range(k)]

    async def done(self, ids: list[str]) -> int:
        return _common.exists_count(self.sync, [f"celery-task-meta-{i}" for i in ids])

    async def roundtrip(self) -> None:
        noop.delay(_common.PAYLOAD).get(timeout=30)

    async def close(self) -> None:
        self.sync.close()
