"""What every adapter shares. Runs inside a peer's venv: stdlib and redis-py only.

An adapter module defines ``worker(args)`` (start the peer's worker the way it documents;
usually ``os.execvp`` of its CLI) and ``Client(args)`` with async methods ``open``,
``enqueue_batch(k) -> ids`` (k jobs, as fast as the peer's client allows: concurrently for an
async client, one after another for a blocking one), ``done(ids) -> int`` (how many of ``ids``
have finished, read from the peer's own result store), ``roundtrip()`` (enqueue one job and
wait for its result the documented way), ``close``, and ``sleep``. ``RUNNER`` is ``"asyncio"``
(default) or ``"trio"``. Roles: ``worker``, ``produce`` (N jobs end to end), ``latency``
(one job at a time), ``enqueue`` (enqueue rate with no worker running).

The job is a no-op that takes one argument, a 100-character string, and returns "ok".
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from types import ModuleType
from typing import Any

PAYLOAD = "x" * 100
BATCH = 100


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["worker", "produce", "latency", "enqueue"])
    p.add_argument("--url", default=os.environ.get("BENCH_URL", "redis://127.0.0.1:6379/0"))
    p.add_argument("--jobs", type=int, default=10_000)
    p.add_argument("--concurrency", type=int, default=100)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--timeout", type=float, default=600.0)
    return p.parse_args(argv)


def exists_count(redis: Any, keys: list[str]) -> int:
    """How many of ``keys`` exist (one EXISTS per 5,000 keys, on a blocking redis-py client)."""
    return sum(redis.exists(*keys[i : i + 5000]) for i in range(0, len(keys), 5000))


async def _wait_done(client: Any, ids: list[Any], limit: float) -> None:
    deadline = time.monotonic() + limit
    while await client.done(ids) < len(ids):
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {await client.done(ids)} of {len(ids)} jobs done")
        await client.sleep(0.02)


async def _enqueue(client: Any, n: int) -> list[Any]:
    ids: list[Any] = []
    while len(ids) < n:
        ids += await client.enqueue_batch(min(BATCH, n - len(ids)))
    return ids


async def _drive(adapter: ModuleType, args: argparse.Namespace) -> dict[str, Any]:
    client = adapter.Client(args)
    await client.open()
    try:
        if args.role == "enqueue":
            t0 = time.perf_counter()
            for _ in range(args.jobs):
                await client.enqueue_one()
            return {"enqueue_per_s": args.jobs / (time.perf_counter() - t0)}
        # warm-up: the worker is up, connected and has run jobs before the clock starts
        await _wait_done(client, await _enqueue(client, args.warmup), args.timeout)
        if args.role == "produce":
            t0 = time.perf_counter()
            ids = await _enqueue(client, args.jobs)
            t1 = time.perf_counter()
            await _wait_done(client, ids, args.timeout)
            t2 = time.perf_counter()
            return {
                "jobs": args.jobs,
                "enqueue_s": t1 - t0,
                "total_s": t2 - t0,
                "jobs_per_s": args.jobs / (t2 - t0),
            }
        latencies = []
        for _ in range(args.jobs):
            t0 = time.perf_counter()
            await client.roundtrip()
            latencies.append(time.perf_counter() - t0)
        return {"latencies_s": latencies}
    finally:
        await client.close()


def main(adapter: ModuleType, argv: list[str] | None = None) -> None:
    args = parse(argv)
    if args.role == "worker":
        adapter.worker(args)
        return
    if getattr(adapter, "RUNNER", "asyncio") == "trio":
        import trio

        out = trio.run(_drive, adapter, args)
    else:
        import asyncio

        out = asyncio.run(_drive(adapter, args))
    print(json.dumps(out), flush=True)
    sys.stdout.flush()
