"""CPU and wall time per job of the producer alone (no worker), source trees in turns.

    python -m benchmarks producer_cpu [--jobs 20000] [--reps 5] [--base REV|SRC --base-name main]
        [--publish]

Two modes, with echomq's own benchmark adapter (``adapters/peer_echomq.py``: ``noop.delay``):

- ``serial``: one caller, each ``await noop.delay(PAYLOAD)`` before the next (the peers
  benchmark's ``enqueue`` figure): wall and CPU microseconds per enqueue.
- ``concurrent``: batches of 100 concurrent ``delay()`` callers (the ``produce`` figure's
  producer, without the worker): the producer's CPU microseconds per job.

Each repetition runs every tree in a fresh process (imports done before the clock), on one
private redis-server emptied between runs; trees alternate so both see the same load.
``--base`` (repeatable): another echomq, a git revision or a folder holding its package.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import redis

from echomq.testing import RedisServer

from . import files, harness, machine, tables, turns

_CHILD = r"""
import gc, json, sys, time
import trio
import peer_echomq as a

MODE, N = sys.argv[1], int(sys.argv[2])

async def main():
    async with a.queue.open():
        for _ in range(300):  # warm-up: connection, script loaded
            await a.noop.delay(a.PAYLOAD)
        gc.collect()
        c0, t0 = time.process_time(), time.perf_counter()
        if MODE == "serial":
            for _ in range(N):
                await a.noop.delay(a.PAYLOAD)
        else:
            async def one():
                await a.noop.delay(a.PAYLOAD)
            for _ in range(N // 100):
                async with trio.open_nursery() as nursery:
                    for _ in range(100):
                        nursery.start_soon(one)
        c1, t1 = time.process_time(), time.perf_counter()
    print(json.dumps({"cpu_us": (c1 - c0) / N * 1e6, "wall_us": (t1 - t0) / N * 1e6}))

trio.run(main)
"""


def _run(src: Path, url: str, mode: str, jobs: int) -> dict[str, float]:
    env = dict(os.environ, BENCH_URL=url, PYTHONHASHSEED="0")
    env["PYTHONPATH"] = os.pathsep.join([str(src), str(harness.HERE)])
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, mode, str(jobs)],
        env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks producer_cpu",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--jobs", type=int, default=20000)
    p.add_argument("--modes", default="serial,concurrent")
    p.add_argument(
        "--base", action="append", default=[],
        help="another echomq (git revision or src folder), in turns (repeatable)",
    )  # fmt: skip
    p.add_argument("--base-name", action="append", default=[], help="a name per --base")
    files.add_arguments(p, reps=5)
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    meta = machine.describe("producer_cpu", argv)
    trees = {"this": turns.this_src()}
    for i, base in enumerate(args.base):
        name = args.base_name[i] if i < len(args.base_name) else f"base{i + 1}"
        trees[name] = turns.src_of(base)
    results: dict[str, dict[str, list[dict[str, float]]]] = {
        mode: {name: [] for name in trees} for mode in args.modes.split(",")
    }
    with RedisServer() as server:
        r = redis.Redis.from_url(server.url)
        for rep in range(args.reps):
            for mode in results:
                for name, src in turns.rotate(list(trees.items()), rep):
                    r.flushall()
                    one = _run(src, server.url, mode, args.jobs)
                    results[mode][name].append(one)
                    print(f"rep {rep} {mode:10} {name:6} cpu {one['cpu_us']:6.1f} us/job"
                          f"  wall {one['wall_us']:6.1f} us/job", flush=True)  # fmt: skip
    summary: dict[str, Any] = {}
    for mode, by_tree in results.items():
        for name, runs in by_tree.items():
            cpu = statistics.median(x["cpu_us"] for x in runs)
            wall = statistics.median(x["wall_us"] for x in runs)
            summary[f"{mode}/{name}"] = {"cpu_us": cpu, "wall_us": wall, "runs": runs}
            print(f"{mode:10} {name:6} median cpu {cpu:6.1f} us/job  wall {wall:6.1f} us/job")
    doc = {"meta": machine.finish(meta), "jobs": args.jobs, "reps": args.reps, "results": summary}
    files.save("producer_cpu", doc, args)


MODES = {
    "serial": "one caller, each delay() awaited before the next",
    "concurrent": "100 concurrent delay() callers",
}


def readme(doc: dict[str, Any], source: str) -> str:
    head = ("µs per job", "tree", "CPU (median)", "wall (median)", "CPU, each repetition")
    rows = []
    for key, v in doc["results"].items():
        mode, tree = key.split("/", 1)
        rows.append(
            (
                MODES.get(mode, mode),
                tree,
                tables.num(v["cpu_us"], 1),
                tables.num(v["wall_us"], 1),
                ", ".join(f"{x['cpu_us']:.1f}" for x in v["runs"]),
            )
        )
    reps = doc.get("reps") or max((len(v["runs"]) for v in doc["results"].values()), default=0)
    setup = f"{doc['jobs']:,} enqueues per run, no worker."
    return (
        tables.conditions(tables.meta_of(doc), reps=reps, source=source, extra=setup)
        + "\n\n"
        + tables.markdown(head, rows)
    )


if __name__ == "__main__":
    main()
