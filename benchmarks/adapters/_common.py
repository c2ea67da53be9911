"""What every adapter shares. Runs inside a peer's venv: stdlib and redis-py only.

An adapter module defines ``worker(args)`` (start the peer's worker the way it documents;
usually ``os.execvp`` of its CLI) and ``Client(args)`` with async methods ``open``,
``enqueue_one() -> id``, ``enqueue_batch(k) -> ids`` (k jobs, as fast as the peer's client
allows: concurrently for an async client, one after another for a blocking one),
``done(ids) -> int`` (how many of ``ids`` have finished, read from the peer's own result
store), ``roundtrip()`` (enqueue one job and wait for its result the documented way),
``close``, and ``sleep``. Optional: ``enqueue_bulk(k) -> ids`` (the peer's bulk enqueue API,
called with chunks of 1,000) and ``count_done(ids) -> int`` (a cheaper count for the drain,
where only ``ids`` are on the queue). ``RUNNER`` is ``"asyncio"`` (default) or ``"trio"``.

Roles: ``worker``; ``enqueue`` (one job at a time, no worker running -> enqueue/s);
``bulk`` (the bulk API in chunks of 1,000, no worker -> jobs/s); ``produce`` (a warm-up of
200 jobs, then N jobs enqueued while the worker runs; the clock stops when all N are done);
``latency`` (one job at a time, enqueue -> result; at most N round trips, stopping after
``--latency-seconds`` once 20 are in); ``drain`` (enqueue N with no worker -- in bulk where
the peer can -- print a ``{"prefilled": N}`` line, then watch: the harness starts a fresh
worker on that line; the rate is (N - done at the first poll that saw one) / (time of the
poll that saw all N - time of that first poll); a ``{"first": done}`` line and a
``{"last": done}`` line mark those two polls as they happen, so that the harness reads the
processes' CPU and Redis's memory at the edges of the same window). Polls run every
``--poll`` seconds (default 5 ms) and read windows of 1,000 ids from the oldest (jobs
finish roughly in order), so one poll costs one small read whatever N is.

The job takes one argument, a 100-character string, and returns "ok": a no-op, or with
``--sleep S`` (worker role) an I/O-bound job that first awaits a sleep of S seconds
(``trio.sleep``, ``asyncio.sleep``; the adapters that take part in the I/O-bound drain
read it).
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
BATCH = 100  # jobs in flight while producing (async clients)
BULK = 1000  # bulk enqueue chunk
WINDOW = 1000  # ids read per poll


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["worker", "produce", "latency", "enqueue", "bulk", "drain"])
    p.add_argument("--url", default=os.environ.get("BENCH_URL", "redis://127.0.0.1:6379/0"))
    p.add_argument("--jobs", type=int, default=10_000)
    p.add_argument("--concurrency", type=int, default=100)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--latency-seconds", type=float, default=20.0)
    p.add_argument("--poll", type=float, default=0.005)
    p.add_argument("--sleep", type=float, default=0.0, help="worker: seconds each job awaits")
    return p.parse_args(argv)


def exists_count(redis: Any, keys: list[str]) -> int:
    """How many of ``keys`` exist (one EXISTS per 5,000 keys, on a blocking redis-py client)."""
    return sum(redis.exists(*keys[i : i + 5000]) for i in range(0, len(keys), 5000))


class Progress:
    """How many of ``ids`` are done: the adapter's ``count_done`` if it has one, else ``done``
    over windows of ``WINDOW`` ids from the oldest (exact once all are done)."""

    def __init__(self, client: Any, ids: list[Any], *, drain: bool = False) -> None:
        self.client, self.ids, self.k = client, ids, 0
        self.cheap = drain and hasattr(client, "count_done")

    async def count(self) -> int:
        if self.cheap:
            return int(await self.client.count_done(self.ids))
        while self.k < len(self.ids):
            window = self.ids[self.k : self.k + WINDOW]
            c = int(await self.client.done(window))
            if c < len(window):
                return self.k + c
            self.k += len(window)
        return len(self.ids)


async def _wait_done(client: Any, ids: list[Any], args: argparse.Namespace) -> None:
    deadline = time.monotonic() + args.timeout
    seen = Progress(client, ids)
    while (c := await seen.count()) < len(ids):
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {c} of {len(ids)} jobs done")
        await client.sleep(args.poll)


async def _enqueue(client: Any, n: int, *, bulk: bool = False) -> list[Any]:
    ids: list[Any] = []
    while len(ids) < n:
        if bulk:
            ids += await client.enqueue_bulk(min(BULK, n - len(ids)))
        else:
            ids += await client.enqueue_batch(min(BATCH, n - len(ids)))
    return ids


async def _drain(client: Any, args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.perf_counter()
    ids = await _enqueue(client, args.jobs, bulk=hasattr(client, "enqueue_bulk"))
    prefill = time.perf_counter() - t0
    print(json.dumps({"prefilled": len(ids), "prefill_s": prefill}), flush=True)
    seen = Progress(client, ids, drain=True)
    deadline = time.monotonic() + args.timeout
    first: float | None = None
    first_count = 0
    while True:
        c = await seen.count()
        t = time.perf_counter()
        if first is None and c > 0:
            first, first_count = t, c
            print(json.dumps({"first": c}), flush=True)
        if c >= len(ids):
            assert first is not None
            print(json.dumps({"last": c}), flush=True)
            span = t - first
            return {
                "drain_jobs": len(ids),
                "prefill_s": prefill,
                "drain_s": span,
                "drain_per_s": (len(ids) - first_count) / span if span > 0 else None,
            }
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {c} of {len(ids)} jobs done")
        await client.sleep(args.poll)


async def _drive(adapter: ModuleType, args: argparse.Namespace) -> dict[str, Any]:
    client = adapter.Client(args)
    await client.open()
    try:
        if args.role == "enqueue":
            t0 = time.perf_counter()
            for _ in range(args.jobs):
                await client.enqueue_one()
            return {"enqueue_per_s": args.jobs / (time.perf_counter() - t0)}
        if args.role == "bulk":
            t0 = time.perf_counter()
            await _enqueue(client, args.jobs, bulk=True)
            return {"bulk_per_s": args.jobs / (time.perf_counter() - t0)}
        if args.role == "drain":
            return await _drain(client, args)
        # warm-up: the worker is up, connected and has run jobs before the clock starts
        await _wait_done(client, await _enqueue(client, args.warmup), args)
        if args.role == "produce":
            t0 = time.perf_counter()
            ids = await _enqueue(client, args.jobs)
            t1 = time.perf_counter()
            await _wait_done(client, ids, args)
            t2 = time.perf_counter()
            return {
                "jobs": args.jobs,
                "enqueue_s": t1 - t0,
                "total_s": t2 - t0,
                "jobs_per_s": args.jobs / (t2 - t0),
            }
        latencies: list[float] = []
        stop = time.perf_counter() + args.latency_seconds
        for _ in range(args.jobs):
            t0 = time.perf_counter()
            await client.roundtrip()
            latencies.append(time.perf_counter() - t0)
            if t0 > stop and len(latencies) >= 20:
                break
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
