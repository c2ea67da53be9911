"""The durable archive: how fast it folds a completions stream into SQLite and PostgreSQL.

And how far behind ``echomq archive`` falls while a producer keeps writing.

    python -m benchmarks archive [--rate 9000] [--seconds 20] [--backlog 100000]
        [--stores sqlite,postgresql] [--reps 3] [--publish]

For each store and repetition, against a private redis-server and (for PostgreSQL) a
private server with ``fsync=on`` (SQLite: WAL, ``synchronous=FULL``; every slice is on disk
before its XACK):

``paced``: the archiver runs as users run it (``python -m echomq archive`` in a process of
its own, batch 500) while a producer XADDs completions entries in the contract's shape at
``--rate`` entries/s (default 9,000: echomq's end-to-end no-op rate on this machine)
for ``--seconds``, each XADD trimming with ``MINID ~`` as the scripts do. Sampled
every 0.25 s: stream length, pending and not yet delivered (the lag). Figures: the rate
reached, the archive's rate over the producing window, the lag (max, p95, at the end),
and the time to catch up once the producer stops. Every entry is then checked to be
stored exactly once.

``drain``: ``--backlog`` entries (default 100,000) already in the stream, then the
archiver starts: entries/s from its first delivery to the last acknowledgement (the ceiling).
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

import echomq
from echomq._scripts.keyspace import Keyspace
from echomq.archive.store import open_store
from echomq.testing import PostgresServer, RedisServer

from . import files, machine, tables
from .files import LOGS
from .stats import Results, percentile

__all__ = ["main", "readme", "run_archive"]

Log = Callable[[str], None]
QUEUE = "bench"
BATCH = 500
STORES = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}


def entry(i: int, now_ms: int) -> list[Any]:
    """A completed job's entry as the scripts write it (sizes like a no-op job's)."""
    return [
        "id", f"job-{i:09d}", "task", "benchmarks.noop", "state", "completed",
        "result", '"ok"', "token", 1, "failures", 0, "created_at", now_ms - 3,
        "claimed_at", now_ms - 1, "finished_at", now_ms,
    ]  # fmt: skip


async def xadd_many(conn: echomq.Connection, first: int, count: int) -> None:
    key = Keyspace(QUEUE).completions
    now_ms = int(time.time() * 1000)
    horizon = now_ms - 24 * 3600 * 1000  # the scripts' default time retention
    await conn.execute_pipeline(
        [["XADD", key, "MINID", "~", horizon, "*", *entry(first + i, now_ms)] for i in range(count)]
    )


async def backlog(conn: echomq.Connection) -> tuple[int, int]:
    """(stream length, entries not acknowledged by the archive: pending + not delivered)."""
    key = Keyspace(QUEUE).completions
    length, groups = await conn.execute_pipeline([["XLEN", key], ["XINFO", "GROUPS", key]])
    if isinstance(groups, Exception) or not groups:
        return int(length), int(length)
    info = dict(zip(groups[0][::2], groups[0][1::2], strict=True))
    return int(length), int(info[b"pending"]) + int(info[b"lag"] or 0)


@asynccontextmanager
async def archiver(redis_url: str, store_url: str, log_path: Path) -> AsyncIterator[trio.Process]:
    command = [
        sys.executable, "-m", "echomq", "archive", "--url", redis_url, "--queue", QUEUE,
        "--to", store_url, "--batch", str(BATCH), "--consumer", "bench",
    ]  # fmt: skip
    with open(log_path, "ab") as out:  # noqa: ASYNC230 - before the child starts
        proc = await trio.lowlevel.open_process(command, stdout=out, stderr=out)
    try:
        yield proc
    finally:
        proc.terminate()
        with trio.move_on_after(10):
            await proc.wait()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def wait_group(conn: echomq.Connection) -> None:
    key = Keyspace(QUEUE).completions
    with trio.fail_after(30):
        while True:
            try:
                if await conn.execute("XINFO", "GROUPS", key):
                    return
            except echomq.errors.ServerError:
                pass
            await trio.sleep(0.02)


async def paced(
    conn: echomq.Connection, redis_url: str, store_url: str, args: argparse.Namespace,
    logs: Path, log: Log,
) -> dict[str, Any]:  # fmt: skip
    rate, seconds = args.archive_rate, args.archive_seconds
    samples: list[tuple[float, int, int]] = []
    async with archiver(redis_url, store_url, logs / "paced.log"):
        await wait_group(conn)
        start = trio.current_time()
        sent = 0
        next_sample = start
        while (now := trio.current_time()) - start < seconds:
            due = int(rate * (now - start)) - sent
            if due > 0:
                await xadd_many(conn, sent, due)
                sent += due
            if now >= next_sample:
                length, unfinished = await backlog(conn)
                samples.append((now - start, length, unfinished))
                next_sample += 0.25
            await trio.sleep(0.005)
        produced_for = trio.current_time() - start
        _, unfinished_at_end = await backlog(conn)
        stop = trio.current_time()
        with trio.fail_after(300):
            while True:
                length, unfinished = await backlog(conn)
                samples.append((trio.current_time() - start, length, unfinished))
                if unfinished == 0:
                    break
                await trio.sleep(0.05)
        catch_up = trio.current_time() - stop
    stored = await trio.to_thread.run_sync(_count, store_url)
    lags = [u for _, _, u in samples]
    log(
        f"  paced: {sent} entries in {produced_for:.1f}s, {stored} stored, "
        f"max lag {max(lags)}, catch-up {catch_up:.2f}s"
    )
    return {
        "produced": sent,
        "stored": stored,
        "producer_rate": sent / produced_for,
        "archive_rate": (sent - unfinished_at_end) / produced_for,
        "lag_max": max(lags),
        "lag_p95": percentile([float(x) for x in lags], 95),
        "lag_end": unfinished_at_end,
        "catch_up_s": catch_up,
        "length_max": max(n for _, n, _ in samples),
        "samples": [(round(t, 2), n, u) for t, n, u in samples],
    }


async def drain(
    conn: echomq.Connection, redis_url: str, store_url: str, args: argparse.Namespace,
    logs: Path, log: Log,
) -> dict[str, Any]:  # fmt: skip
    total = args.archive_backlog
    for first in range(0, total, 1000):
        await xadd_many(conn, first, min(1000, total - first))
    async with archiver(redis_url, store_url, logs / "drain.log"):
        await wait_group(conn)
        with trio.fail_after(600):
            while (await backlog(conn))[1] >= total:  # noqa: ASYNC110 - polling Redis: no event
                await trio.sleep(0.005)
            start = trio.current_time()
            while (await backlog(conn))[1] > 0:  # noqa: ASYNC110 - polling Redis: no event
                await trio.sleep(0.01)
            took = trio.current_time() - start
    stored = await trio.to_thread.run_sync(_count, store_url)
    log(f"  drain: {total} entries in {took:.2f}s ({total / took:,.0f}/s), {stored} stored")
    return {"backlog": total, "stored": stored, "drain_rate": total / took, "seconds": took}


def _count(store_url: str) -> int:
    store = open_store(store_url)
    try:
        return store.count(QUEUE)
    finally:
        store.close()


@asynccontextmanager
async def stores(work: Path) -> AsyncIterator[dict[str, Callable[[str], str]]]:
    """name -> a function making a fresh, empty store URL for a run's label."""
    pg = PostgresServer(fsync=True)
    await trio.to_thread.run_sync(pg.start)
    try:
        import psycopg

        def postgres(label: str) -> str:
            with psycopg.connect(pg.url, autocommit=True) as c:
                c.execute(f"CREATE DATABASE {label}")
            return pg.database_url(label)

        def sqlite(label: str) -> str:
            return f"sqlite:///{work / (label + '.db')}"

        yield {"sqlite": sqlite, "postgresql": postgres}
    finally:
        await trio.to_thread.run_sync(pg.stop)


async def run_archive(args: argparse.Namespace, *, log: Log) -> Results:
    res = Results()
    work = Path(tempfile.mkdtemp(prefix="echomq-bench-archive-", dir=os.environ.get("TMPDIR")))
    logs = LOGS
    logs.mkdir(parents=True, exist_ok=True)
    res.meta["archive"] = {
        "rate": args.archive_rate,
        "seconds": args.archive_seconds,
        "backlog": args.archive_backlog,
        "batch": BATCH,
        "work_dir_fs": _filesystem(work),
        "runs": [],
    }
    try:
        async with stores(work) as make:
            for rep in range(args.reps):
                for name in args.archive_stores.split(","):
                    for mode in ("paced", "drain"):
                        label = f"{name}_{mode}_{rep}"
                        log(f"archive: {label}")
                        with RedisServer() as redis:
                            async with echomq.connect(redis.url) as conn:
                                url = make[name](label)
                                runner = paced if mode == "paced" else drain
                                figs = await runner(conn, redis.url, url, args, logs, log)
                        figs.update(store=name, mode=mode, rep=rep)
                        res.meta["archive"]["runs"].append(figs)
                        _record(res, name, mode, figs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return res


def _record(res: Results, name: str, mode: str, figs: dict[str, Any]) -> None:
    if mode == "drain":
        res.add(f"{name}: drain, backlog of {figs['backlog']:,}", figs["drain_rate"], "entries/s")
        res.add(f"{name}: drain, stored exactly once", figs["stored"] == figs["backlog"], "bool")
        return
    res.add(f"{name}: producer rate reached", figs["producer_rate"], "entries/s")
    res.add(
        f"{name}: archive rate while producing",
        figs["archive_rate"],
        "entries/s",
        ceiling=figs["producer_rate"],
        of="producer rate",
    )
    res.add(f"{name}: lag max", figs["lag_max"], "entries")
    res.add(f"{name}: lag p95", figs["lag_p95"], "entries")
    res.add(f"{name}: lag when the producer stopped", figs["lag_end"], "entries")
    res.add(f"{name}: stream length max", figs["length_max"], "entries")
    res.add(f"{name}: catch-up after the producer stopped", figs["catch_up_s"], "s")
    res.add(f"{name}: paced, stored exactly once", figs["stored"] == figs["produced"], "bool")


def _filesystem(path: Path) -> str:
    try:
        import subprocess

        out = subprocess.run(
            ["df", "--output=fstype,source", str(path)], capture_output=True, text=True
        ).stdout.split("\n")[1]
        return " ".join(out.split())
    except (OSError, IndexError):
        return "unknown"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks archive",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--rate", dest="archive_rate", type=float, default=9000.0, help="entries/s")
    p.add_argument("--seconds", dest="archive_seconds", type=float, default=20.0, help="producing")
    p.add_argument("--backlog", dest="archive_backlog", type=int, default=100_000)
    p.add_argument("--stores", dest="archive_stores", default="sqlite,postgresql")
    files.add_arguments(p, reps=3)
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    meta = machine.describe("archive", argv)
    res = trio.run(functools.partial(run_archive, args, log=machine.log))
    res.meta = machine.finish({**meta, **res.meta})
    print(res.table("the durable archive"), flush=True)
    files.save("archive", res.to_json(), args)


def readme(doc: dict[str, Any], source: str) -> str:
    meta = doc["meta"]
    setup = meta.get("archive", {})
    reps = max((len(f["values"]) for f in doc["figures"].values()), default=0)
    extra = (
        f"Paced: {setup.get('rate', 0):,.0f} entries/s for {setup.get('seconds', 0):g} s; "
        f"drain: a backlog of {setup.get('backlog', 0):,}; slices of {setup.get('batch', '?')}."
    )
    head = tables.conditions(meta, reps=reps, source=source, extra=extra)
    return head + "\n\n" + tables.grid(doc["figures"], STORES, first="medians (range)")
