"""Stopping what won't stop: cancel escalation, and the watchdog's cost.

    python -m benchmarks stopkit [--runs 100] [--grace 0.2] [--lease 0.3] [--reps 5]
        [--base REV|SRC] [--publish]

The worker processes serve this module's queue (``benchmarks.stopkit:queue``).

1. **Cancel of a job that ignores it**, ``--runs`` times for each kind of holder, on a
   private redis-server, leases of ``--lease`` s (a lease keeper tick is a third of it):

   - ``thread``: an in-process worker runs a thread task that never looks at its cancel;
   - ``blocked``: a worker process runs an async task that blocks its event loop for
     ``--block`` s (nothing in that worker runs; its watchdog thread beats);
   - ``gone``: a client claims the job and then does nothing (a holder that died), while
     another worker serves the queue.

   Each run: the job is held, ``cancel(grace=--grace)``, and the delay from the request to
   the fence is read on the server's clock (the row's ``cancel_requested`` and
   ``cancel_fenced``); the bound is grace + one lease tick. Then the cancelled attempt's
   own ``complete`` (its token) is sent and must be refused (``StaleToken``); at the end,
   the commits of cancelled attempts are counted: rows whose result is not the cancel's,
   plus completions the workers report (their heartbeat records' counters).

2. **The watchdog's cost**: end-to-end no-op jobs/s (a producer enqueues ``--e2e-jobs``
   jobs in batches while one worker process, concurrency 100, runs them), with the watchdog
   on (``block_threshold`` 1 s, the default) and off (``inf``), alternating within one run,
   ``--reps`` times each; the medians and their ratio. With ``--base`` (another echomq: a
   git revision or a folder holding its package), the same figure for that tree.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

import echomq
from echomq import admin, jobs
from echomq.errors import StaleToken
from echomq.testing import RedisServer, open_worker_process

from . import files, machine, turns
from . import tables as md
from .ceiling import CLIENTS, PIPELINE, redis_benchmark
from .machine import log

ROOT = Path(__file__).resolve().parent.parent

# the app the worker processes serve (``benchmarks.stopkit:queue``)
queue = echomq.Queue(os.environ.get("EMQ_BENCH_QUEUE", "stopkit"))
LEASE = float(os.environ.get("EMQ_BENCH_LEASE", "0.3"))


@queue.task(name="block", lease=LEASE)
async def block(seconds: float) -> str:
    time.sleep(seconds)  # noqa: ASYNC251 - blocking the event loop is the point
    return "unblocked"


@queue.task(name="noop", lease=30.0)
async def noop() -> None:
    return None


_releases: dict[str, threading.Event] = {}


async def wait_for(check: Callable[[], Awaitable[bool]], within: float = 30.0) -> None:
    """Poll observable state (a row, a counter) until ``check()`` holds."""
    with trio.fail_after(within):
        while not await check():  # noqa: ASYNC110 - state in Redis: nothing to wait on
            await trio.sleep(0.002)


async def _state(conn: echomq.Connection, name: str, job_id: str) -> echomq.JobInfo:
    info = await jobs.get_job(conn, name, job_id)
    assert info is not None, job_id
    return info


async def one_cancel(
    conn: echomq.Connection, name: str, job_id: str, token: int, grace: float
) -> dict[str, Any]:
    """Cancel a held job with a grace; answer the server-side delay and what followed."""
    assert await echomq.cancel.request(conn, name, job_id, "bench", grace=grace) == "signalled"

    async def fenced() -> bool:
        return (await _state(conn, name, job_id)).cancel_fenced_at is not None

    await wait_for(fenced)
    info = await _state(conn, name, job_id)
    assert info.cancel_requested_at is not None and info.cancel_fenced_at is not None
    try:
        await jobs.complete(conn, name, job_id, token, b"late")
        refused = False
    except StaleToken:
        refused = True
    after = await _state(conn, name, job_id)
    return {
        "delay_ms": info.cancel_fenced_at - info.cancel_requested_at,
        "late_complete_refused": refused,
        "committed": after.result != b"cancelled:bench",
    }


async def held_token(conn: echomq.Connection, name: str, job_id: str) -> int:
    async def active() -> bool:
        return (await _state(conn, name, job_id)).state is echomq.JobState.ACTIVE

    await wait_for(active)
    return (await _state(conn, name, job_id)).token


async def run_thread(url: str, args: argparse.Namespace) -> tuple[list[dict[str, Any]], int]:
    name = f"bench-thread-{os.getpid()}"
    q = echomq.Queue(name, url=url)

    @q.task(name="deaf", lease=args.lease)
    def deaf(key: str) -> str:
        _releases[key].wait(60)
        return "finished anyway"

    worker = echomq.Worker(q, concurrency=4)
    samples = []
    async with q.open(), trio.open_nursery() as nursery:
        await nursery.start(worker.serve)
        for run in range(args.runs):
            key = f"r{run}"
            _releases[key] = threading.Event()
            handle = await deaf.delay(key)
            token = await held_token(q.connection, name, handle.id)
            samples.append(await one_cancel(q.connection, name, handle.id, token, args.grace))
            _releases[key].set()
        completed = worker.statistics().completed
        worker.shutdown()
    return samples, completed


async def run_blocked(url: str, args: argparse.Namespace) -> tuple[list[dict[str, Any]], int]:
    name = f"bench-blocked-{os.getpid()}"
    env = {"EMQ_BENCH_QUEUE": name, "EMQ_BENCH_LEASE": str(args.lease)}
    samples = []
    async with (
        echomq.connect(url) as conn,
        open_worker_process(
            "benchmarks.stopkit:queue", url=url, concurrency=1, env=env, cwd=ROOT,
            args=("--block-threshold", "0.2"),
        ) as proc,
    ):  # fmt: skip
        for _ in range(args.runs):
            job_id = await jobs.enqueue(
                conn, name, json.dumps({"task": "block", "args": [args.block]})
            )
            token = await held_token(conn, name, job_id)
            samples.append(await one_cancel(conn, name, job_id, token, args.grace))

        async def idle() -> bool:
            found = await admin.list_workers(conn, name)
            return any(w.alive and w.held == 0 for w in found.workers)

        await wait_for(idle, 60)
        [record] = (await admin.list_workers(conn, name)).workers
        del proc
    return samples, record.counters.get("completed", 0)


async def run_gone(url: str, args: argparse.Namespace) -> tuple[list[dict[str, Any]], int]:
    name = f"bench-gone-{os.getpid()}"
    q = echomq.Queue(name, url=url)

    parked = trio.Event()

    @q.task(name="park", lease=args.lease)
    async def park() -> None:
        await parked.wait()

    bystander = echomq.Worker(q, concurrency=1)
    samples = []
    async with q.open(), trio.open_nursery() as nursery:
        await nursery.start(bystander.serve)
        # the bystander's one slot is taken for the whole run: it beats, it claims nothing
        await held_token(q.connection, name, (await park.delay()).id)
        for _ in range(args.runs):
            job_id = await jobs.enqueue(q.connection, name, b"{}")
            [held] = (await jobs.claim_batch(q.connection, name, 60_000, worker="ghost")).jobs
            assert held.id == job_id
            samples.append(await one_cancel(q.connection, name, job_id, held.token, args.grace))
        parked.set()
        await wait_for(lambda: _idle(bystander))
        completed = bystander.statistics().completed - 1  # the parked job
        bystander.shutdown()
    return samples, completed


async def _idle(worker: echomq.Worker) -> bool:
    return worker.statistics().held == 0


def summarize(
    kind: str, samples: list[dict[str, Any]], completed: int, args: argparse.Namespace
) -> dict[str, Any]:
    delays = sorted(s["delay_ms"] for s in samples)
    bound = round((args.grace + args.lease / 3) * 1000)
    return {
        "holder": kind,
        "runs": len(samples),
        "grace_ms": round(args.grace * 1000),
        "bound_ms": bound,
        "delay_p50_ms": statistics.median(delays),
        "delay_p99_ms": delays[min(len(delays) - 1, round(0.99 * len(delays)))],
        "delay_max_ms": delays[-1],
        "within_bound": sum(d <= bound for d in delays),
        "late_complete_refused": sum(s["late_complete_refused"] for s in samples),
        "commits_from_cancelled": sum(s["committed"] for s in samples) + completed,
    }


# -- the watchdog's cost ---------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process (all its threads) used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def e2e_rate(
    url: str, jobs_n: int, options: tuple[str, ...], src: Path | None
) -> tuple[float, float]:
    """No-op jobs/s, and the worker's CPU µs per job: one worker process (concurrency 100)
    while a producer enqueues. CPU time is steadier than wall time on a shared machine."""
    name = f"bench-e2e-{time.monotonic_ns()}"
    env: dict[str, str | None] = {"EMQ_BENCH_QUEUE": name}
    if src is not None:
        env["PYTHONPATH"] = f"{src}{os.pathsep}{ROOT}"
    async with (
        echomq.connect(url) as conn,
        open_worker_process(
            "benchmarks.stopkit:queue", url=url, concurrency=100, env=env, cwd=ROOT, args=options
        ) as worker,
    ):
        payload = json.dumps({"task": "noop", "args": [], "kwargs": {}})
        news = [jobs.NewJob(payload=payload) for _ in range(250)]
        cpu = cpu_seconds(worker.pid)
        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(jobs_n // 250):
                nursery.start_soon(jobs.enqueue_many, conn, name, news)

        async def done() -> bool:
            return (await admin.stats(conn, name)).completed_total >= jobs_n // 250 * 250

        await wait_for(done, 300)
        elapsed = time.perf_counter() - start
        used = cpu_seconds(worker.pid) - cpu
        await admin.pause(conn, name)
    total = jobs_n // 250 * 250
    return total / elapsed, used / total * 1e6


async def run_cost(url: str, port: int, args: argparse.Namespace) -> dict[str, Any]:
    variants: dict[str, tuple[tuple[str, ...], Path | None]] = {
        "watchdog on": (("--block-threshold", "1.0"), None),
        "watchdog off": (("--block-threshold", "inf"), None),
    }
    if args.base is not None:
        variants["base (--base)"] = ((), turns.src_of(args.base))
    rates: dict[str, list[float]] = {k: [] for k in variants}
    cpus: dict[str, list[float]] = {k: [] for k in variants}
    for rep in range(args.reps):
        order = list(variants.items())
        if rep % 2:
            order.reverse()  # alternate the order: no variant always runs first
        for label, (options, src) in order:
            rate, cpu = await e2e_rate(url, args.e2e_jobs, options, src)
            rates[label].append(rate)
            cpus[label].append(cpu)
            log(f"e2e rep {rep + 1} {label}: {rate:,.0f} jobs/s, {cpu:.1f} CPU us/job")
    # the server's ceiling on this machine now: redis-benchmark PING, pipelined, 50 clients
    ceiling = await redis_benchmark(port, ["PING"], 200_000)
    log(f"redis-benchmark ceiling (PING -P {PIPELINE} -c {CLIENTS}): {ceiling:,.0f} calls/s")
    medians = {k: statistics.median(v) for k, v in rates.items()}
    cpu_medians = {k: statistics.median(v) for k, v in cpus.items()}
    out: dict[str, Any] = {
        "rates": rates,
        "medians": medians,
        "cpu_us_per_job": cpus,
        "cpu_medians": cpu_medians,
        "ceiling_ping": ceiling,
    }
    out["on_over_off"] = medians["watchdog on"] / medians["watchdog off"]
    out["cpu_on_over_off"] = cpu_medians["watchdog on"] / cpu_medians["watchdog off"]
    if args.base is not None:
        base = next(label for label in medians if label.startswith("base"))
        out["on_over_base"] = medians["watchdog on"] / medians[base]
        out["cpu_on_over_base"] = cpu_medians["watchdog on"] / cpu_medians[base]
    return out


# -- report ---------------------------------------------------------------------------------


def readme(results: dict[str, Any], source: str) -> str:
    meta = results["meta"]
    lines = [
        md.conditions(meta, source=source),
        "",
        f"Cancel of a job that ignores it: lease {meta['lease_s']} s (tick "
        f"{meta['lease_s'] / 3:.2f} s), grace {meta['grace_s']} s; delay = server ms from the "
        "request to the fence.",
        "",
        "| holder | runs | bound (grace + tick) | delay p50 | p99 | max | within bound "
        "| late complete refused | commits from cancelled attempts |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in results["cancel"]:
        lines.append(
            f"| {row['holder']} | {row['runs']} | {row['bound_ms']} ms "
            f"| {row['delay_p50_ms']:.0f} ms | {row['delay_p99_ms']} ms "
            f"| {row['delay_max_ms']} ms | {row['within_bound']} "
            f"| {row['late_complete_refused']} | {row['commits_from_cancelled']} |"
        )
    cost = results.get("cost")
    if cost:
        lines += [
            "",
            f"End-to-end no-op jobs/s (1 worker process, concurrency 100, {meta['e2e_jobs']:,} "
            f"jobs, {meta['reps']} alternating reps, median), beside the machine's ceiling "
            f"(redis-benchmark PING -P {PIPELINE} -c {CLIENTS} on the same server, "
            f"{cost['ceiling_ping']:,.0f} calls/s):",
            "",
            "| variant | jobs/s (median) | x ceiling | worker CPU µs per job (median) "
            "| jobs/s, each rep |",
            "|---|---:|---:|---:|---|",
        ]
        for label, rates in cost["rates"].items():
            reps = ", ".join(f"{r:,.0f}" for r in rates)
            cpu = cost["cpu_medians"][label]
            rate = cost["medians"][label]
            share = rate / cost["ceiling_ping"]
            lines.append(f"| {label} | {rate:,.0f} | {share:.2%} | {cpu:.1f} | {reps} |")
        lines.append("")
        lines.append(
            f"- watchdog on / off: jobs/s {cost['on_over_off']:.3f}, "
            f"CPU per job {cost['cpu_on_over_off']:.3f}"
        )
        if "on_over_base" in cost:
            lines.append(
                f"- this tree (watchdog on) / base: jobs/s {cost['on_over_base']:.3f}, "
                f"CPU per job {cost['cpu_on_over_base']:.3f}"
            )
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks stopkit",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--runs", type=int, default=100, help="cancels per kind of holder")
    p.add_argument("--grace", type=float, default=0.2)
    p.add_argument("--lease", type=float, default=0.3)
    p.add_argument("--block", type=float, default=0.6, help="seconds the blocked holder blocks")
    p.add_argument("--holders", default="thread,blocked,gone")
    p.add_argument("--e2e-jobs", type=int, default=20_000)
    p.add_argument("--no-cost", dest="cost", action="store_false", help="skip the cost part")
    p.add_argument("--base", help="the cost part: another echomq (git revision or src folder)")
    files.add_arguments(p, reps=5)
    return p


async def amain(args: argparse.Namespace, argv: list[str] | None) -> dict[str, Any]:
    meta = machine.describe("stopkit", argv)
    meta.update(lease_s=args.lease, grace_s=args.grace, e2e_jobs=args.e2e_jobs, reps=args.reps)
    results: dict[str, Any] = {"meta": meta, "cancel": []}
    runners = {"thread": run_thread, "blocked": run_blocked, "gone": run_gone}
    for kind in args.holders.split(","):
        with RedisServer() as server:
            log(f"cancel, {kind} holder: {args.runs} runs")
            samples, completed = await runners[kind](server.url, args)
        row = summarize(kind, samples, completed, args)
        row["samples_ms"] = [s["delay_ms"] for s in samples]
        results["cancel"].append(row)
        log(json.dumps({k: v for k, v in row.items() if k != "samples_ms"}))
    if args.cost:
        with RedisServer() as server:
            results["cost"] = await run_cost(server.url, server.port, args)
    machine.finish(meta)
    return results


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    results = trio.run(amain, args, argv)
    files.save("stopkit", results, args)
    print(readme(results, "this run"))


if __name__ == "__main__":
    main()
