"""echomq itself, run exactly like the peers: ``echomq.Worker(queue, concurrency=100)`` in a
worker process started the way DESIGN.md section 1 shows (``trio.run(worker.serve)``), a
producer that calls ``noop.delay(...)``, ``echomq.jobs.enqueue_many`` (one script call per
1,000 jobs) for the bulk figure, and ``handle.result()`` for the latency figure. With
``--sleep S`` the worker's job first awaits ``trio.sleep(S)`` (the I/O-bound drain).

This file runs in echomq's own venv (the harness gives it ``sys.executable``).
"""

from __future__ import annotations

import os
from typing import Any

import redis
import trio

import echomq
import echomq.jobs

try:
    from echomq._scripts import validate
    from echomq._scripts.keyspace import Keyspace
except ImportError:  # an echomq from before the _scripts layer (a --base run of 0.1)
    from echomq._redis import validate  # type: ignore[no-redef]
    from echomq._redis.keyspace import Keyspace  # type: ignore[no-redef]

RUNNER = "trio"
NAME = "bench"
URL = os.environ.get("BENCH_URL", "redis://127.0.0.1:6379/0")
queue = echomq.Queue(NAME, url=URL)  # type: ignore[attr-defined]
PAYLOAD = "x" * 100
SLEEP = 0.0  # seconds each job awaits (the worker's --sleep)


@queue.task(name="noop")
async def noop(payload: str) -> str:
    if SLEEP:
        await trio.sleep(SLEEP)
    return "ok"


def _no_op_hooks(k: int) -> None:
    """``BENCH_HOOKS=K`` (cpu_per_job --hooks): K no-op hooks that fire on every job."""

    async def around(job: Any, call_next: Any) -> Any:
        return await call_next()

    def done(job: Any, outcome: Any) -> None:
        pass

    async def done_async(job: Any, outcome: Any) -> None:
        pass

    for i in range(k):
        if i % 3 == 0:
            queue.hooks.around_run(around)
        elif i % 3 == 1:
            queue.hooks.on_complete(done)
        else:
            queue.hooks.on_complete(done_async)


if os.environ.get("BENCH_HOOKS"):
    _no_op_hooks(int(os.environ["BENCH_HOOKS"]))


def worker(args: Any) -> None:
    global SLEEP
    SLEEP = args.sleep
    queue.url = args.url
    w = echomq.Worker(queue, concurrency=args.concurrency)  # type: ignore[attr-defined]
    trio.run(w.serve)


class Client:
    sleep = staticmethod(trio.sleep)

    def __init__(self, args: Any) -> None:
        queue.url = args.url
        self.sync = redis.Redis.from_url(args.url)
        self.metrics = Keyspace(NAME).metrics_completed
        self.enqueued = 0

    async def open(self) -> None:
        self._cm = queue.open()
        await self._cm.__aenter__()

    async def enqueue_one(self) -> str:
        self.enqueued += 1
        return str((await noop.delay(PAYLOAD)).id)

    async def enqueue_bulk(self, k: int) -> list[str]:
        # a chunk of 1,000 is sent as enqueue_many calls of at most the per-call cap
        # (MAX_ENQUEUE, 250 since issue 9), pipelined on the one connection
        news = [noop.new_job((PAYLOAD,)) for _ in range(k)]
        cap = getattr(validate, "MAX_ENQUEUE", k)
        parts: list[list[str]] = [[] for _ in range(0, k, cap)]

        async def one(i: int) -> None:
            parts[i] = await echomq.jobs.enqueue_many(
                queue.connection, NAME, news[i * cap : (i + 1) * cap]
            )

        async with trio.open_nursery() as nursery:
            for i in range(len(parts)):
                nursery.start_soon(one, i)
        ids = [i for part in parts for i in part]
        self.enqueued += len(ids)
        return ids

    async def enqueue_batch(self, k: int) -> list[str]:
        ids: list[str] = []

        async def one() -> None:
            ids.append(await self.enqueue_one())

        async with trio.open_nursery() as nursery:
            for _ in range(k):
                nursery.start_soon(one)
        return ids

    async def done(self, ids: list[str]) -> int:
        # rows of completed jobs are trimmed by retention, so count the completed metric;
        # every job enqueued before ``ids`` has already been waited for (the warm-up)
        count = int(self.sync.hget(self.metrics, "count") or 0)
        return max(0, count - (self.enqueued - len(ids)))

    count_done = done  # already one HGET, whatever the number of ids

    async def roundtrip(self) -> None:
        handle = await noop.delay(PAYLOAD)
        await handle.result(timeout=30)

    async def close(self) -> None:
        await self._cm.__aexit__(None, None, None)
