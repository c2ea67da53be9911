"""rq: one worker process, ``rq worker -w rq.worker.SimpleWorker`` (runs each job in the worker
process itself; rq's default ``Worker`` forks a child per job). rq runs one job at a time per
worker process, so its concurrency is 1, not 100. Results kept (rq's default).

``BENCH_RQ_MODE=fork`` runs the default forking ``rq worker``, ``BENCH_RQ_MODE=pool`` runs
``rq worker-pool -n $BENCH_RQ_PROCESSES`` (2 by default: the previous tables' setting); both
measured ~50 jobs/s here against ~250 for SimpleWorker (1,000 jobs, one run).
"""

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
    mode = os.environ.get("BENCH_RQ_MODE", "simple")
    if mode == "pool":
        procs = os.environ.get("BENCH_RQ_PROCESSES", "2")
        os.execvp("rq", ["rq", "worker-pool", "-n", procs, "-u", args.url, "-q", "bench"])
    cls = ["-w", "rq.worker.SimpleWorker"] if mode == "simple" else []
    os.execvp("rq", ["rq", "worker", *cls, "-u", args.url, "-q", "bench"])


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

    async def enqueue_bulk(self, k: int) -> list[str]:
        datas = [Queue.prepare_data(noop, (_common.PAYLOAD,)) for _ in range(k)]
        with self.conn.pipeline() as pipe:
            jobs = self.queue.enqueue_many(datas, pipeline=pipe)
            pipe.execute()
        return [str(j.id) for j in jobs]

    async def done(self, ids: list[str]) -> int:
        return _common.exists_count(self.conn, [f"rq:results:{i}" for i in ids])

    async def roundtrip(self) -> None:
        job = self.queue.enqueue(noop, _common.PAYLOAD)
        if job.latest_result(timeout=30) is None:
            raise TimeoutError("no result")

    async def close(self) -> None:
        self.conn.close()
