"""The completions stream: its cost, the archive on the real worker, memory after 1M jobs.

    python -m benchmarks stream [--parts stream,archive,memory] [--jobs 10000] [--reps 3]
        [--seconds 20] [--memory-jobs 1000000] [--publish]

``stream``: end-to-end no-op jobs/s of one worker process (``echomq.Worker``, concurrency
``--concurrency``) **with** the completions stream and **without** it, in turns in every
repetition, each on a fresh private redis-server. "Without" runs the very same scripts
with the ``XADD`` / ``XTRIM`` lines of ``include/finished.lua`` cut out, in the worker
process only (:mod:`benchmarks.noop`; the per-minute counters, the row's TTL and the
index stay). Two modes: ``produce`` (``--jobs`` jobs enqueued by a producer in this
process, 100 in flight, while the worker runs: the clock stops when ``metrics:completed``
reaches the count) and ``drain`` (the same count enqueued first, then the worker started:
first completion to last, the worker's own rate).

``archive``: the worker at its full rate (the ``produce`` mode, ``--seconds`` of
production) while ``python -m echomq archive`` folds the real stream into SQLite and into
PostgreSQL (``fsync=on``): the worker's rate with the archive running, the archive's lag
(pending + undelivered, sampled every 0.25 s), the catch-up once production stops, and
every finished job stored exactly once.

``memory``: ``--memory-jobs`` no-op jobs through the worker with the default retention
(the producer keeps at most 50,000 waiting), then ``INFO memory`` and what each part holds
(rows, the ``completed`` index, the stream, the counters).
"""

from __future__ import annotations

import argparse
import functools
import shutil
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

import echomq
from echomq import jobs
from echomq._scripts.keyspace import Keyspace
from echomq.testing import RedisServer

from . import files, machine, tables
from .archive import STORES, archiver, backlog, stores, wait_group
from .files import LOGS
from .noop import (
    PAYLOAD,
    QUEUE,
    completed,
    make_queue,
    produce,
    until_completed,
    used_memory,
    warm_up,
    worker,
)
from .stats import Results, percentile

__all__ = ["main", "readme", "run_stream"]

Log = Callable[[str], None]


async def run_produce(url: str, args: argparse.Namespace, stream: bool, tag: str) -> float:
    queue, noop = make_queue(url)
    async with queue.open(), worker(url, args.concurrency, stream, tag):
        conn = queue.connection
        base = await warm_up(conn, noop)
        start = trio.current_time()
        await produce(noop, args.jobs)
        end = await until_completed(conn, base + args.jobs)
    return float(args.jobs / (end - start))


async def run_drain(url: str, args: argparse.Namespace, stream: bool, tag: str) -> float:
    queue, noop = make_queue(url)
    async with queue.open():
        conn = queue.connection
        news = [noop.new_job((PAYLOAD,)) for _ in range(args.jobs)]
        for i in range(0, len(news), 250):
            await jobs.enqueue_many(conn, QUEUE, news[i : i + 250])
        async with worker(url, args.concurrency, stream, tag):
            with trio.fail_after(120):
                while await completed(conn) == 0:  # noqa: ASYNC110 - polling Redis
                    await trio.sleep(0.002)
            start = trio.current_time()
            first = await completed(conn)
            end = await until_completed(conn, args.jobs)
    return float((args.jobs - first) / (end - start))


async def part_stream(args: argparse.Namespace, res: Results, log: Log) -> None:
    runs: list[dict[str, Any]] = []
    for rep in range(args.reps):
        for mode, runner in (("produce", run_produce), ("drain", run_drain)):
            order = (True, False) if rep % 2 == 0 else (False, True)
            for stream in order:
                label = "with the stream" if stream else "without the stream"
                with RedisServer() as server:
                    rate = await runner(server.url, args, stream, f"{mode}-{rep}-{int(stream)}")
                log(f"stream: {mode}, {label}, rep {rep + 1}: {rate:,.0f} jobs/s")
                res.add(f"{mode}: no-op jobs/s {label}", rate, "jobs/s")
                runs.append({"mode": mode, "stream": stream, "rep": rep, "rate": rate})
    res.meta["stream_runs"] = runs
    for mode in ("produce", "drain"):
        ratios = []
        for rep in range(args.reps):
            got = {r["stream"]: r["rate"] for r in runs if r["mode"] == mode and r["rep"] == rep}
            ratios.append(got[True] / got[False])
        res.add(f"{mode}: with / without (per rep)", statistics.median(ratios), "ratio")
        res.meta[f"{mode}_ratios"] = ratios


# -- the archive on the real stream ----------------------------------------------------------


async def part_archive(args: argparse.Namespace, res: Results, log: Log) -> None:
    work = Path(tempfile.mkdtemp(prefix="echomq-bench-stream-"))
    runs: list[dict[str, Any]] = []
    try:
        async with stores(work) as make:
            for rep in range(args.reps):
                for name in args.archive_stores.split(","):
                    label = f"live_{name}_{rep}"
                    with RedisServer() as server:
                        figs = await archive_live(server.url, make[name](label), args, log)
                    figs.update(store=name, rep=rep)
                    runs.append(figs)
                    log(
                        f"archive: {name} rep {rep + 1}: worker {figs['worker_rate']:,.0f}/s, "
                        f"lag max {figs['lag_max']}, catch-up {figs['catch_up_s']:.2f} s, "
                        f"stored {figs['stored']}/{figs['finished']}"
                    )
                    res.add(f"{name}: worker jobs/s, archive running", figs["worker_rate"],
                            "jobs/s")  # fmt: skip
                    res.add(f"{name}: archive rate while producing", figs["archive_rate"],
                            "entries/s", ceiling=figs["worker_rate"], of="worker rate")  # fmt: skip
                    res.add(f"{name}: lag max", figs["lag_max"], "entries")
                    res.add(f"{name}: lag p95", figs["lag_p95"], "entries")
                    res.add(f"{name}: catch-up after production stopped", figs["catch_up_s"], "s")
                    res.add(f"{name}: stored exactly once",
                            figs["stored"] == figs["finished"], "bool")  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)
    res.meta["archive_runs"] = runs


async def archive_live(url: str, store: str, args: argparse.Namespace, log: Log) -> dict[str, Any]:
    from .archive import _count

    queue, noop = make_queue(url)
    samples: list[tuple[float, int, int]] = []
    async with queue.open(), worker(url, args.concurrency, True, "archive"):
        conn = queue.connection
        base = await warm_up(conn, noop)
        async with archiver(url, store, LOGS / "stream-archive.log"):
            await wait_group(conn)
            stop_producing = trio.Event()

            async def producer() -> None:
                with trio.move_on_after(args.seconds):
                    while True:
                        await produce(noop, 1000)
                stop_producing.set()

            start = trio.current_time()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(producer)
                while not stop_producing.is_set():
                    length, unfinished = await backlog(conn)
                    samples.append((trio.current_time() - start, length, unfinished))
                    with trio.move_on_after(0.25):
                        await stop_producing.wait()
            enqueued = int(await conn.execute("HGET", Keyspace(QUEUE).meta, "seq"))
            end = await until_completed(conn, enqueued)
            seconds = end - start
            finished = enqueued
            _, lag_at_end = await backlog(conn)
            stop = trio.current_time()
            with trio.fail_after(300):
                while True:
                    length, unfinished = await backlog(conn)
                    samples.append((trio.current_time() - start, length, unfinished))
                    if unfinished == 0:
                        break
                    await trio.sleep(0.05)
            catch_up = trio.current_time() - stop
    stored = await trio.to_thread.run_sync(_count, store)
    lags = [u for _, _, u in samples]
    return {
        "finished": finished,
        "stored": stored,
        "worker_rate": (finished - base) / seconds,
        "archive_rate": (finished - lag_at_end) / seconds,
        "lag_max": max(lags),
        "lag_p95": percentile([float(x) for x in lags], 95),
        "lag_end": lag_at_end,
        "catch_up_s": catch_up,
        "length_max": max(n for _, n, _ in samples),
        "samples": [(round(t, 2), n, u) for t, n, u in samples],
    }


# -- memory after 1M jobs ----------------------------------------------------------------------


async def part_memory(args: argparse.Namespace, res: Results, log: Log) -> None:
    total = args.memory_jobs
    with RedisServer() as server:
        queue, noop = make_queue(server.url)
        async with queue.open(), worker(server.url, args.concurrency, True, "memory"):
            conn = queue.connection
            ks = Keyspace(QUEUE)
            before = await used_memory(conn)
            start = trio.current_time()
            sent = 0
            while sent < total:
                waiting = int(await conn.execute("ZCARD", ks.pending))
                if waiting > 50_000:
                    await trio.sleep(0.05)
                    continue
                chunk = min(10_000, total - sent)
                news = [noop.new_job((PAYLOAD,)) for _ in range(chunk)]
                for i in range(0, chunk, 250):
                    await jobs.enqueue_many(conn, QUEUE, news[i : i + 250])
                sent += chunk
                if sent % 100_000 == 0:
                    log(f"memory: {sent:,} enqueued, {await completed(conn):,} completed")
            await until_completed(conn, total, within=3600)
            took = trio.current_time() - start
            figs = await memory_figures(conn, ks)
        figs.update(jobs=total, seconds=took, empty_server_bytes=before)
    log(f"memory: {figs}")
    res.meta["memory"] = figs
    res.add("memory: used_memory after the jobs", figs["used_memory"] / 2**20, "MiB")
    res.add("memory: per finished job", figs["per_job_bytes"], "bytes")
    res.add("memory: rows kept (completed)", figs["completed"], "rows")
    res.add("memory: completions entries kept", figs["stream_length"], "entries")
    res.add("memory: jobs/s through the worker", total / took, "jobs/s")


async def memory_figures(conn: echomq.Connection, ks: Keyspace) -> dict[str, Any]:
    used = await used_memory(conn)
    completed_n = int(await conn.execute("ZCARD", ks.completed))
    sample = await conn.execute("ZRANDMEMBER", ks.completed, 200)
    row_sizes = [
        int(await conn.execute("MEMORY", "USAGE", ks.job(m.decode()), "SAMPLES", 0)) for m in sample
    ]
    stream_bytes = int(await conn.execute("MEMORY", "USAGE", ks.completions, "SAMPLES", 0))
    index_bytes = int(await conn.execute("MEMORY", "USAGE", ks.completed, "SAMPLES", 0))
    stream_length = int(await conn.execute("XLEN", ks.completions))
    keys = int(await conn.execute("DBSIZE"))
    capped = await conn.execute("HGETALL", ks.metrics_capped)
    row = statistics.mean(row_sizes) if row_sizes else 0.0
    return {
        "used_memory": used,
        "keys": keys,
        "completed": completed_n,
        "row_bytes_mean": row,
        "rows_bytes_estimate": row * completed_n,
        "completed_index_bytes": index_bytes,
        "stream_length": stream_length,
        "stream_bytes": stream_bytes,
        "stream_bytes_per_entry": stream_bytes / stream_length if stream_length else 0,
        "per_job_bytes": used / max(1, completed_n),
        "capped": {k.decode(): int(v) for k, v in zip(capped[::2], capped[1::2], strict=True)},
    }


async def run_stream(args: argparse.Namespace, *, log: Log) -> Results:
    res = Results()
    parts = args.parts.split(",")
    res.meta["stream"] = {"parts": parts, "jobs": args.jobs, "concurrency": args.concurrency}
    if "stream" in parts:
        await part_stream(args, res, log)
    if "archive" in parts:
        await part_archive(args, res, log)
    if "memory" in parts:
        await part_memory(args, res, log)
    return res


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks stream",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--parts", default="stream,archive,memory", help="which parts")
    p.add_argument("--jobs", type=int, default=10_000, help="jobs per stream run")
    p.add_argument("--concurrency", type=int, default=100, help="the worker's")
    p.add_argument("--seconds", type=float, default=20.0, help="archive part: producing")
    p.add_argument("--archive-stores", default="sqlite,postgresql", help="archive part")
    p.add_argument("--memory-jobs", type=int, default=1_000_000, help="memory part")
    files.add_arguments(p, reps=3)
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    meta = machine.describe("stream", argv)
    res = trio.run(functools.partial(run_stream, args, log=machine.log))
    res.meta = machine.finish({**meta, **res.meta})
    print(res.table("the completions stream, the live archive, memory"), flush=True)
    files.save("stream", res.to_json(), args)


def readme(doc: dict[str, Any], source: str) -> str:
    meta, found = doc["meta"], doc["figures"]
    reps = max((len(f["values"]) for f in found.values()), default=0)
    parts = [tables.conditions(meta, reps=reps, source=source)]
    rows = []
    for mode in ("produce", "drain"):
        ratios = meta.get(f"{mode}_ratios")
        runs = [r for r in meta.get("stream_runs", []) if r["mode"] == mode]
        if not ratios or not runs:
            continue
        by_rep = {(r["rep"], r["stream"]): r["rate"] for r in runs}
        cells = [
            f"{tables.num(by_rep.get((rep, True)))} / {tables.num(by_rep.get((rep, False)))}"
            for rep in range(len(ratios))
        ]
        each = ", ".join(f"{x:.2f}" for x in ratios)
        rows.append((f"{mode}: no-op jobs/s with the stream / without", "; ".join(cells),
                     f"**{statistics.median(ratios):.2f}** ({each})"))  # fmt: skip
    if rows:
        head = ("the stream's cost", "each repetition", "with / without, median (each)")
        parts.append(tables.markdown(head, rows))
    if any(name.split(": ")[0] in STORES for name in found):
        live = tables.grid(found, STORES, first="the archive on the worker's stream")
        parts.append(live)
    memory = [name for name in found if name.startswith("memory: ")]
    if memory:
        m = meta.get("memory", {})
        parts.append(
            f"Memory after {m.get('jobs', 0):,} no-op jobs with the default retention:\n\n"
            + tables.figures(found, memory)
        )
    return "\n\n".join(parts)
