"""What meeting asyncio, blocking code, Prometheus and tracing costs.

    python -m benchmarks ecosystem [--part hooks|producers|e2e|all] [--reps 5] [--jobs 10000]
        [--producer-jobs 20000] [--variants baseline,hooks,otel-api,metrics] [--publish]

Two parts, each measured within one run, repetitions interleaved (medians):

1. **Producers** (one private redis-server): ``noop.delay`` (trio), ``noop.adelay``
   (asyncio) and ``noop.delay_sync`` (blocking) enqueue the same no-op job (a 100-character
   string argument), with 1 caller and with 64 concurrent callers (blocking: 1 only);
   jobs/s. The asyncio figure's ratio is taken to the trio figure of the same repetition.
2. **End to end** (a fresh redis-server per measurement): one worker process at
   concurrency 100 runs N no-op jobs that a trio producer keeps 100 in flight; no-op
   jobs/s from the first enqueue until the queue's completed count reaches N. Variants:
   ``baseline``: ``--baseline`` (a git revision, default the merge-base of HEAD and main,
   its src/ exported) on its own ``PYTHONPATH``; ``hooks``: this tree with
   opentelemetry made unimportable in the worker (the counting hooks alone);
   ``otel-api``: this tree, opentelemetry-api importable, no SDK configured;
   ``metrics``: this tree, ``--metrics-port`` served and scraped every
   ``--scrape-every`` seconds while the jobs run; ``metrics-idle``: served, never scraped
   (``--variants`` picks some). Ratios to the ``hooks`` figure of the same repetition (the
   baseline's ratio: hooks / baseline). The worker's CPU time per job (``/proc``, over
   the same window) is reported beside jobs/s: it moves far less with the machine's load.

Every repetition of each part starts with the machine's Redis ceiling (``redis-benchmark``
``PING``, pipelined and one round trip at a time, on a fresh server), as ``peers`` does.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from time import perf_counter
from typing import Any

import httpx
import trio

import echomq
from echomq.testing import RedisServer, free_port

from . import files, machine, tables, turns
from .harness import ceilings
from .stats import Results

__all__ = ["main", "readme"]

ROOT = Path(__file__).resolve().parent.parent
PAYLOAD = "x" * 100
WORKER = """
import sys, os
if os.environ.get("BENCH_NO_OTEL") == "1":
    sys.modules["opentelemetry"] = None  # as if it were not installed
import trio, echomq
queue = echomq.Queue("bench", url=sys.argv[1])

@queue.task(name="noop")
async def noop(payload):
    return "ok"

options = {"concurrency": int(sys.argv[2])}
if len(sys.argv) > 3:
    options["metrics_port"] = int(sys.argv[3])
print("echomq from", echomq.__file__, flush=True)
trio.run(echomq.Worker(queue, **options).serve)
"""


def make_queue(url: str, name: str) -> tuple[echomq.Queue, echomq.app.Task]:
    q = echomq.Queue(name, url=url)

    @q.task(name="noop")
    async def noop(payload: str) -> str:
        return "ok"

    return q, noop


# -- 1. producers ---------------------------------------------------------------------------


async def trio_producer(url: str, queue: str, jobs: int, callers: int) -> float:
    q, noop = make_queue(url, queue)
    async with q.open():
        await noop.delay(PAYLOAD)  # connect and load the script first
        start = time.perf_counter()

        async def one_caller(n: int) -> None:
            for _ in range(n):
                await noop.delay(PAYLOAD)

        async with trio.open_nursery() as nursery:
            for _ in range(callers):
                nursery.start_soon(one_caller, jobs // callers)
        return (jobs // callers * callers) / (time.perf_counter() - start)


async def asyncio_producer(url: str, queue: str, jobs: int, callers: int) -> float:
    q, noop = make_queue(url, queue)
    async with q.aopen():
        await noop.adelay(PAYLOAD)
        start = time.perf_counter()

        async def one_caller(n: int) -> None:
            for _ in range(n):
                await noop.adelay(PAYLOAD)

        await asyncio.gather(*(one_caller(jobs // callers) for _ in range(callers)))
        return (jobs // callers * callers) / (time.perf_counter() - start)


def sync_producer(url: str, queue: str, jobs: int) -> float:
    q, noop = make_queue(url, queue)
    noop.delay_sync(PAYLOAD)
    start = time.perf_counter()
    for _ in range(jobs):
        noop.delay_sync(PAYLOAD)
    rate = jobs / (time.perf_counter() - start)
    q.close_sync()
    return rate


def run_producers(args: argparse.Namespace, log: Callable[[str], None]) -> Results:
    res = Results()
    jobs = args.producer_jobs
    with RedisServer() as server:
        log(f"producers: redis-server on port {server.port}, {jobs} jobs per figure")
        for rep in range(args.reps):
            trio.run(ceil, rep, res, log)
            for callers in (1, 64):
                n = jobs if callers > 1 else jobs // 4
                name = f"p{rep}-{callers}"
                t = trio.run(trio_producer, server.url, name + "t", n, callers)
                a = asyncio.run(asyncio_producer(server.url, name + "a", n, callers))
                res.add(f"enqueue, trio, {callers} caller(s)", t, "jobs/s")
                res.add(
                    f"enqueue, asyncio, {callers} caller(s)",
                    a,
                    "jobs/s",
                    ceiling=t,
                    of="trio, same rep",
                )
                log(f"rep {rep + 1} callers {callers}: trio {t:,.0f}/s asyncio {a:,.0f}/s")
            s = sync_producer(server.url, f"p{rep}-s", jobs // 4)
            res.add("enqueue, blocking (delay_sync), 1 caller", s, "jobs/s")
            server_flush(server)
    return res


async def ceil(rep: int, res: Results, log: Callable[[str], None]) -> None:
    """The machine's Redis ceiling now (``peers``' figures and samples)."""
    await ceilings(rep, res, log=log)


def server_flush(server: RedisServer) -> None:
    import redis

    redis.Redis(port=server.port).flushall()


# -- 2. end to end ----------------------------------------------------------------------------


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def start_worker(
    url: str, concurrency: int, *, src: Path | None, otel: bool, metrics_port: int | None
) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = str(src if src is not None else ROOT / "src")
    if not otel:
        env["BENCH_NO_OTEL"] = "1"
    argv = [sys.executable, "-c", WORKER, url, str(concurrency)]
    if metrics_port is not None:
        argv.append(str(metrics_port))
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process used so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def produce_and_wait(url: str, jobs: int, in_flight: int, pid: int) -> tuple[float, float]:
    """Enqueue ``jobs`` (``in_flight`` at a time) and wait until all completed: jobs/s, and
    the worker process's CPU microseconds per job over the same window."""
    q, noop = make_queue(url, "bench")
    async with q.open():
        warm = [await noop.delay(PAYLOAD) for _ in range(50)]
        for handle in warm:
            await handle.result(timeout=60)
        base = (await echomq.admin.stats(q.connection, "bench")).completed_total
        cpu = cpu_seconds(pid)
        start = time.perf_counter()
        limiter = trio.CapacityLimiter(in_flight)

        async def one() -> None:
            async with limiter:
                await noop.delay(PAYLOAD)

        async with trio.open_nursery() as nursery:
            for _ in range(jobs):
                nursery.start_soon(one)
        while True:  # the completed counter, read every 10 ms (the peers harness's way)
            done = (await echomq.admin.stats(q.connection, "bench")).completed_total - base
            if done >= jobs:
                rate = jobs / (time.perf_counter() - start)
                return rate, (cpu_seconds(pid) - cpu) * 1e6 / jobs
            await trio.sleep(0.01)


async def scrape_loop(port: int, every: float) -> None:
    """GET /metrics every ``every`` seconds (a Prometheus scraping the worker)."""
    while True:
        try:
            answer = await trio.to_thread.run_sync(httpx.get, f"http://127.0.0.1:{port}/metrics")
            assert answer.status_code == 200, answer.text
        except httpx.HTTPError:
            pass  # not serving yet
        await trio.sleep(every)


async def one_e2e(
    args: argparse.Namespace, variant: str, baseline_src: Path | None
) -> tuple[float, float]:
    with RedisServer() as server:
        port = free_port() if variant.startswith("metrics") else None
        proc = start_worker(
            server.url,
            args.concurrency,
            src=baseline_src if variant == "baseline" else None,
            otel=variant != "hooks",
            metrics_port=port,
        )
        try:
            async with trio.open_nursery() as nursery:
                if variant == "metrics" and port is not None:
                    nursery.start_soon(scrape_loop, port, args.scrape_every)
                with trio.fail_after(300):
                    figures = await produce_and_wait(
                        server.url, args.jobs, args.concurrency, proc.pid
                    )
                nursery.cancel_scope.cancel()
            return figures
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def run_e2e(args: argparse.Namespace, log: Callable[[str], None]) -> Results:
    res = Results()
    variants = args.variants.split(",")
    if True:
        ref = args.baseline or git("merge-base", "HEAD", "main")
        baseline_src = turns.src_of(ref)
        base_commit = git("rev-parse", "--short", ref)
        res.meta["baseline_commit"] = base_commit
        log(f"e2e: baseline {base_commit}, {args.jobs} jobs per figure")
        for rep in range(args.reps):
            trio.run(ceil, args.reps + rep, res, log)
            order = turns.rotate(variants, rep)
            measured = {v: trio.run(one_e2e, args, v, baseline_src) for v in order}
            hooks, hooks_cpu = measured["hooks" if "hooks" in measured else variants[0]]
            for v in variants:
                label = {
                    "baseline": "baseline (--baseline)",
                    "hooks": "this tree, no opentelemetry",
                    "otel-api": "this tree, opentelemetry-api, no SDK",
                    "metrics": f"this tree, /metrics scraped every {args.scrape_every:g} s",
                    "metrics-idle": "this tree, /metrics served, not scraped",
                }[v]
                rate, cpu = measured[v]
                if v == "baseline":
                    res.add(f"e2e jobs/s, {label}", rate, "jobs/s", ceiling=rate, of="")
                    res.figures[f"e2e jobs/s, {label}"].ratios[-1] = hooks / rate
                    res.figures[f"e2e jobs/s, {label}"].ceiling = "hooks / baseline"
                    res.add(f"worker CPU per job, {label}", cpu, "us", ceiling=cpu, of="")
                    res.figures[f"worker CPU per job, {label}"].ratios[-1] = hooks_cpu / cpu
                    res.figures[f"worker CPU per job, {label}"].ceiling = "hooks / baseline"
                else:
                    res.add(f"e2e jobs/s, {label}", rate, "jobs/s", ceiling=hooks, of="hooks")
                    res.add(
                        f"worker CPU per job, {label}", cpu, "us", ceiling=hooks_cpu, of="hooks"
                    )
            log(
                f"rep {rep + 1}: "
                + ", ".join(
                    f"{v} {measured[v][0]:,.0f}/s {measured[v][1]:.0f} us" for v in variants
                )
            )
    return res


# -- 3. the hooks alone (timeit) ----------------------------------------------------------


def run_hooks(args: argparse.Namespace, log: Callable[[str], None]) -> Results:
    """What each job pays for this work in the worker, timed alone (microseconds): robust
    where the end-to-end figures move by 10 % with the machine's load."""
    import timeit

    from echomq import _tracing
    from echomq._worker.cancellation import Held
    from echomq._worker.tally import Tally
    from echomq.jobs.lifecycle import _read_claim

    res = Results()
    tally = Tally()
    held = Held(id="j", token=1, lease_ms=1000)
    reply4 = [x for i in range(100) for x in (f"id{i}".encode(), b"p" * 100, 1, 0)] + [-1]
    reply5 = [x for i in range(100) for x in (f"id{i}".encode(), b"p" * 100, 1, 0, None)] + [-1]

    def parse_old() -> None:  # the 0.1 stride, for the difference
        n = len(reply4) - 1
        [(reply4[i], reply4[i + 1], reply4[i + 2], reply4[i + 3]) for i in range(0, n, 4)]

    def parse_new() -> None:
        n = len(reply5) - 1
        [(reply5[i], reply5[i + 1], reply5[i + 2], reply5[i + 3], reply5[i + 4])
         for i in range(0, n, 5)]  # fmt: skip

    def per_job() -> None:
        started = perf_counter()
        held.task = "noop"
        held.ran = perf_counter() - started
        tally.record(held.task, "completed", held.ran)
        if _tracing.ENABLED and _tracing.on():
            pass

    n = 200_000
    for rep in range(args.reps):
        hook = min(timeit.repeat(per_job, number=n, repeat=3)) / n * 1e6
        stride = (
            (
                min(timeit.repeat(parse_new, number=n // 100, repeat=3))
                - min(timeit.repeat(parse_old, number=n // 100, repeat=3))
            )
            / n
            * 1e6
        )
        res.add("hooks per job (timer, tally, tracing flag)", hook, "us")
        res.add("claim reply: 5 values per job instead of 4, per job", stride, "us")
        log(f"hooks rep {rep + 1}: {hook:.3f} us + {stride:.3f} us per job")
    _ = _read_claim(reply5)  # the real reader accepts the new stride
    res.notes.append(
        f"opentelemetry importable here: {_tracing.ENABLED} (tracer provider set: "
        f"{_tracing.ENABLED and _tracing.on()})"
    )
    return res


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks ecosystem",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--part", choices=["hooks", "producers", "e2e", "all"], default="all")
    p.add_argument("--producer-jobs", type=int, default=20_000, help="producers: per figure")
    p.add_argument("--jobs", type=int, default=10_000, help="end to end: jobs per figure")
    p.add_argument("--concurrency", type=int, default=100, help="end to end: the worker's")
    p.add_argument("--baseline", help="end to end: the revision to compare with")
    p.add_argument("--scrape-every", type=float, default=1.0, help="end to end: seconds")
    p.add_argument(
        "--variants",
        default="baseline,hooks,otel-api,metrics",
        help="end to end: of baseline,hooks,otel-api,metrics,metrics-idle",
    )
    files.add_arguments(p, reps=5)
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    log = machine.log
    total = Results(meta=machine.describe("ecosystem", argv))
    if args.part in ("hooks", "all"):
        res = run_hooks(args, log)
        print(res.table("the worker's per-job hooks, timed alone"), flush=True)
        total.merge(res)
    if args.part in ("producers", "all"):
        res = run_producers(args, log)
        print(res.table("producers: trio vs asyncio vs blocking (one redis-server)"), flush=True)
        total.merge(res)
    if args.part in ("e2e", "all"):
        res = run_e2e(args, log)
        print(res.table("end to end: hooks, opentelemetry-api, /metrics"), flush=True)
        total.merge(res)
    machine.finish(total.meta)
    files.save("ecosystem", total.to_json(), args)


def _name(figure: str) -> str:
    """A figure's name for the README: the baseline without its commit."""
    return re.sub(r"baseline \([^)]*\)", "baseline", figure)


def readme(doc: dict[str, Any], source: str) -> str:
    found = {_name(k): v for k, v in doc["figures"].items() if not k.startswith("ceiling: ")}
    reps = max((len(f["values"]) for f in found.values()), default=0)
    out = [tables.conditions(doc["meta"], reps=reps, source=source), tables.figures(found)]
    rows = []
    for key, label in (
        ("ceiling: PING -P16 -c50", "PING, 50 clients, pipelined 16 deep"),
        ("ceiling: PING -P1 -c1 (one round trip at a time)", "PING, 1 client, one at a time"),
    ):
        v = doc["figures"].get(key, {}).get("values", [])
        if v:
            rows.append((label, tables.num(statistics.median(v)), tables.span(v)))
    if rows:
        head = ("the Redis ceiling in the same repetitions (redis-benchmark)", "calls/s", "range")
        out.append(tables.markdown(head, rows))
    return "\n\n".join(out)


if __name__ == "__main__":
    main()
