"""What an idle queue keeps after retention: bytes and keys left once its jobs expired.

    python -m benchmarks idle [--jobs 200000] [--keep 1] [--idle 20] [--src PATH] [--json PATH]

``--jobs`` no-op jobs are enqueued (250 per call) on a fresh private redis-server, with
the queue's ``keep_result``, ``keep_dead`` and ``completions_keep`` set to ``--keep``
seconds; then one worker process (``benchmarks.noop``, default options: a recovery tick
every 5 s) runs them all. Nothing more is enqueued: the queue is idle. Every 0.5 s for
``--idle`` seconds it samples ``INFO memory`` ``used_memory``, ``DBSIZE``, the
``completed`` index's members, the completions stream's entries and ``admin.stats``'
completed count, and reports the last sample (and the names of the keys left, when
few, with their ``MEMORY USAGE``) beside the server's used_memory before the
first job (the empty queue), and when the index and the stream were first found empty.

``--src PATH`` runs the worker from another echomq's ``src/`` (a checkout of main, say):
the same run, before and after a change. The results go to
benchmarks/results/scratch/ (or ``--json``); nothing of this run is published.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import trio

from echomq import admin, jobs
from echomq._scripts.keyspace import Keyspace
from echomq.testing import RedisServer

from . import files, machine
from .noop import PAYLOAD, QUEUE, completed, make_queue, used_memory, worker

__all__ = ["main", "run_idle"]


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks idle", description=(__doc__ or "").split("\n")[0]
    )
    p.add_argument("--jobs", type=int, default=200_000, help="jobs run (default 200,000)")
    p.add_argument("--keep", type=float, default=1.0, help="retention, seconds (default 1)")
    p.add_argument("--idle", type=float, default=20.0, help="seconds sampled idle (default 20)")
    p.add_argument("--concurrency", type=int, default=50, help="the worker's (default 50)")
    p.add_argument("--src", type=Path, help="run the worker from this echomq src/ instead")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--json", type=Path, help="save the results here (default: scratch)")
    return p.parse_args(argv)


async def sample(conn: Any, ks: Keyspace, since: float) -> dict[str, Any]:
    stats = await admin.stats(conn, QUEUE)
    return {
        "t": round(trio.current_time() - since, 2),
        "used_memory": await used_memory(conn),
        "keys": int(await conn.execute("DBSIZE")),
        "completed_index": int(await conn.execute("ZCARD", ks.completed)),
        "stream": int(await conn.execute("XLEN", ks.completions)),
        "stats_completed": stats.completed,
    }


async def run_idle(args: argparse.Namespace) -> dict[str, Any]:
    ks = Keyspace(QUEUE)
    with RedisServer() as server:
        queue, noop = make_queue(server.url)
        async with queue.open():
            conn = queue.connection
            keep = args.keep
            await admin.set_retention(
                conn, QUEUE, keep_result=keep, keep_dead=keep, completions_keep=keep
            )
            empty = await used_memory(conn)
            news = [noop.new_job((PAYLOAD,)) for _ in range(args.jobs)]
            for i in range(0, len(news), 250):
                await jobs.enqueue_many(conn, QUEUE, news[i : i + 250])
            loaded = await used_memory(conn)
            machine.log(f"idle: {args.jobs:,} jobs enqueued, used_memory {loaded:,}")
            tag = "src" if args.src is not None else "tree"
            async with worker(server.url, args.concurrency, True, f"idle-{tag}", src=args.src):
                start = trio.current_time()
                with trio.fail_after(1800):
                    while await completed(conn) < args.jobs:  # noqa: ASYNC110 - polling Redis
                        await trio.sleep(0.05)
                ran = trio.current_time() - start
                machine.log(f"idle: all ran in {ran:.1f} s; now idle for {args.idle:.0f} s")
                idle_from = trio.current_time()
                samples = [await sample(conn, ks, idle_from)]
                clean_at = None
                while trio.current_time() - idle_from < args.idle:
                    await trio.sleep(0.5)
                    samples.append(await sample(conn, ks, idle_from))
                    last = samples[-1]
                    if clean_at is None and last["completed_index"] == last["stream"] == 0:
                        clean_at = last["t"]
                names = await conn.execute("SCAN", 0, "COUNT", 1000)
                left = sorted(k.decode() for k in names[1]) if samples[-1]["keys"] <= 100 else []
                sizes = [await conn.execute("MEMORY", "USAGE", k, "SAMPLES", 0) for k in left]
                key_bytes = sum(int(n or 0) for n in sizes)
    last = samples[-1]
    doc = {
        "src": str(args.src) if args.src is not None else "this tree",
        "jobs": args.jobs,
        "keep_s": args.keep,
        "run_s": round(ran, 1),
        "used_memory_empty": empty,
        "used_memory_loaded": loaded,
        "idle_end": last,
        "bytes_left": last["used_memory"] - empty,
        "clean_after_s": clean_at,
        "keys_left": left,  # their names, when few
        "keys_left_bytes": key_bytes,  # MEMORY USAGE of those keys (the rest: clients, scripts)
        "samples": samples,
    }
    return doc


def main(argv: list[str]) -> None:
    args = parse(argv)
    meta = machine.describe("idle", argv)
    doc = {**meta, **trio.run(run_idle, args)}
    machine.finish(doc)
    last = doc["idle_end"]
    print(
        f"{doc['src']}: {doc['jobs']:,} jobs, keep {doc['keep_s']} s, idle {last['t']} s: "
        f"used_memory {last['used_memory']:,} B ({doc['bytes_left']:,} B over the empty "
        f"queue's {doc['used_memory_empty']:,}), keys {last['keys']:,}, completed index "
        f"{last['completed_index']:,}, stream {last['stream']:,}, stats completed "
        f"{last['stats_completed']:,}; the keys' own bytes {doc['keys_left_bytes']:,}; "
        f"index and stream empty after "
        f"{doc['clean_after_s'] if doc['clean_after_s'] is not None else 'never'} s"
    )
    files.save("idle", doc, args)
