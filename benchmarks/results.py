"""The scripts' half of issue 11: what the completions stream costs, whether the archive
keeps up with the real worker, and Redis memory after 1M jobs (``python -m benchmarks
results``; ``--results-parts stream,archive,memory``).

``stream``: end-to-end no-op jobs/s of one worker process (``echomq.Worker``, concurrency
``--concurrency``) **with** the completions stream and **without** it, in the same run,
interleaved per repetition, each on a fresh private redis-server. "Without" runs the very
same scripts with the ``XADD`` / ``XTRIM`` lines of ``include/finished.lua`` cut out, in
the worker process only (the per-minute counters, the row's TTL and the index stay: they
are other parts of the feature). Two modes: ``produce`` (``--jobs`` jobs enqueued by a
producer in this process, 100 in flight, while the worker runs: the clock stops when
``metrics:completed`` reaches the count) and ``drain`` (the same count enqueued first,
then the worker started: first completion to last, the worker's own rate).

``archive``: the worker at its full rate (the ``produce`` mode, ``--results-seconds`` of
production) while ``python -m echomq archive`` folds the real stream into SQLite and into
PostgreSQL (``fsync=on``): the worker's rate with the archive running, the archive's lag
(pending + undelivered, sampled every 0.25 s), the catch-up once production stops, and
every finished job stored exactly once.

``memory``: ``--memory-jobs`` (1,000,000) no-op jobs through the worker with the default
retention (the producer keeps at most 50,000 waiting), then ``INFO memory`` and what each
part holds (rows, the ``completed`` index, the stream, the counters).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

import echomq
from echomq import jobs
from echomq._scripts.keyspace import Keyspace
from echomq.testing import RedisServer

from .archive import archiver, backlog, stores, wait_group
from .stats import Results, percentile

__all__ = ["run_results"]

Log = Callable[[str], None]
QUEUE = "bench"
PAYLOAD = "x" * 100
LOGS = Path(__file__).resolve().parent / "results" / "logs"
ROOT = Path(__file__).resolve().parent.parent  # where ``-m benchmarks.results`` imports
IN_FLIGHT = 100


# -- the worker process ---------------------------------------------------------------------


def _without_stream() -> None:
    """Cut the stream's XADD / XTRIM out of every script (this process only)."""
    from echomq._scripts import loader as scripts

    cut = re.compile(
        r"^\s*redis\.call\('XADD', stream.*$|"
        r"^\s*local trimmed = redis\.call\('XTRIM'.*$|"
        r"^\s*if trimmed > 0 then .*$",
        re.MULTILINE,
    )
    table: Any = scripts.SCRIPTS
    for name, script in list(table.items()):
        if "redis.call('XADD', stream" in script.source:
            source = cut.sub("", script.source)
            table[name] = scripts.make_script(name, source, script.includes, script.uses)


def worker_main(argv: list[str]) -> None:
    """``python -m benchmarks.results worker URL CONCURRENCY [--no-stream]``."""
    url, concurrency = argv[0], int(argv[1])
    if "--no-stream" in argv:
        _without_stream()
    queue = echomq.Queue(QUEUE, url=url)

    @queue.task(name="noop")
    async def noop(payload: str) -> str:
        return "ok"

    trio.run(echomq.Worker(queue, concurrency=concurrency).serve)


@asynccontextmanager
async def worker(url: str, concurrency: int, stream: bool, tag: str) -> AsyncIterator[None]:
    LOGS.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "benchmarks.results", "worker", url, str(concurrency)]
    if not stream:
        command.append("--no-stream")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(LOGS / f"results-{tag}.log", "ab") as out:  # noqa: ASYNC230 - before the child
        proc = await trio.lowlevel.open_process(command, stdout=out, stderr=out, cwd=ROOT, env=env)
    try:
        yield
    finally:
        proc.terminate()
        with trio.move_on_after(10):
            await proc.wait()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


# -- producing and counting --------------------------------------------------------------------


def _queue(url: str) -> tuple[echomq.Queue, Any]:
    queue = echomq.Queue(QUEUE, url=url)

    @queue.task(name="noop")
    async def noop(payload: str) -> str:
        return "ok"

    return queue, noop


async def completed(conn: echomq.Connection) -> int:
    return int(await conn.execute("HGET", Keyspace(QUEUE).metrics_completed, "count") or 0)


async def produce(noop: Any, count: int) -> None:
    """``count`` jobs by ``noop.delay``, IN_FLIGHT at a time."""
    left = count

    async def one_by_one() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await noop.delay(PAYLOAD)

    async with trio.open_nursery() as nursery:
        for _ in range(IN_FLIGHT):
            nursery.start_soon(one_by_one)


async def until_completed(conn: echomq.Connection, count: int, within: float = 900) -> float:
    """Wait until ``count`` jobs completed; answer the moment (trio clock)."""
    with trio.fail_after(within):
        while await completed(conn) < count:  # noqa: ASYNC110 - polling Redis: no event
            await trio.sleep(0.01)
    return trio.current_time()


async def warm_up(conn: echomq.Connection, noop: Any) -> int:
    await produce(noop, 200)
    await until_completed(conn, 200, within=60)
    return 200


async def run_produce(url: str, args: argparse.Namespace, stream: bool, tag: str) -> float:
    queue, noop = _queue(url)
    async with queue.open(), worker(url, args.concurrency, stream, tag):
        conn = queue.connection
        base = await warm_up(conn, noop)
        start = trio.current_time()
        await produce(noop, args.jobs)
        end = await until_completed(conn, base + args.jobs)
    return args.jobs / (end - start)


async def run_drain(url: str, args: argparse.Namespace, stream: bool, tag: str) -> float:
    queue, noop = _queue(url)
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
    return (args.jobs - first) / (end - start)


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
    work = Path(tempfile.mkdtemp(prefix="echomq-bench-results-"))
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

    queue, noop = _queue(url)
    samples: list[tuple[float, int, int]] = []
    async with queue.open(), worker(url, args.concurrency, True, "archive"):
        conn = queue.connection
        base = await warm_up(conn, noop)
        async with archiver(url, store, LOGS / "results-archive.log"):
            await wait_group(conn)
            stop_producing = trio.Event()

            async def producer() -> None:
                with trio.move_on_after(args.results_seconds):
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
        queue, noop = _queue(server.url)
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


async def used_memory(conn: echomq.Connection) -> int:
    info = (await conn.execute("INFO", "memory")).decode()
    return int(re.search(r"^used_memory:(\d+)", info, re.MULTILINE)[1])  # type: ignore[index]


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


async def run_results(args: argparse.Namespace, *, log: Log) -> Results:
    res = Results()
    parts = args.results_parts.split(",")
    res.meta["results"] = {"parts": parts, "jobs": args.jobs, "concurrency": args.concurrency}
    if "stream" in parts:
        await part_stream(args, res, log)
    if "archive" in parts:
        await part_archive(args, res, log)
    if "memory" in parts:
        await part_memory(args, res, log)
    return res


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker_main(sys.argv[2:])
    else:
        raise SystemExit("python -m benchmarks results (this module's entry is the worker)")
