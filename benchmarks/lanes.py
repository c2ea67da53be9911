"""Group lanes and rate limits: fairness, the claim's cost with groups, a shared rate limit.

    python -m benchmarks lanes [--parts fairness,claim,rate] [--reps 5] [--rate-seconds 30]
        [--rate-kind fixed|sliding|both] [--rate-processes 3] [--scale 1.0] [--publish]

Each section starts its own private redis-server (``echomq.testing.RedisServer``):
- fairness: 2 groups, 10,000 then 10 ready jobs, 8 slots. (a) The consumer's claims
  replayed through the verbs (claim as many as there are free slots, finish the oldest
  job, claim again): the claim call, and the job start, at which each small-group job
  starts. (b) A real ``Worker(concurrency=8)`` with a no-op task drains the queue (waited
  on through the completed counter, bounded); the start order is then read from the rows'
  ``claimed_at`` (ms, server clock), not from ``active`` events (pub/sub drops them when
  the subscriber falls behind). The row records no claim sequence (``attempts`` is 1 for
  every job: checked), and one claim call, or several, can share a millisecond, so ties
  are broken against the small group: in one ms the big group's jobs count first, each
  group's in enqueue order. ``worker_ranks`` is each small job's rank so (the highest its
  ms allows), ``worker_ranks_low`` the lowest (1 + the starts of earlier ms): the true
  rank lies between. Both beside the same jobs ungrouped (FIFO: the small jobs start last).
- claim: claims/s through the verbs (one connection, count=1 with 64 callers, count=10
  with 32 and count=100 with 16) on a queue of ungrouped jobs and on queues whose jobs are
  spread over 10 / 1,000 / 10,000 groups, interleaved in each repetition; the script's
  server time per call (``INFO commandstats``: evalsha usec_per_call; ``SLOWLOG`` of calls
  made one at a time); and, from those, what the script does per claim (``script_calls``:
  each command it calls, calls and us per claim, evalsha = the whole script; the last
  repetition's). Each repetition starts with the machine's Redis ceiling on the same
  server (``redis-benchmark`` PING, ``-P16 -c50`` and one round trip at a time, ``-P1
  -c1``), recorded beside the figures.
- rate: 100 jobs/s on the queue, 3 worker processes (``echomq worker``, concurrency 16)
  and a backlog of no-op jobs; the starts (rows' ``claimed_at``, server clock) counted
  over 30 whole windows, and over 30 s from the first start; ``max_any_1s``, the most
  starts in any 1 s stretch of the run wherever it begins (the edge burst a fixed window
  allows; slid over every start of the run, ``run_starts`` in ``run_ms``). ``--rate-kind``
  picks the limiter (``sliding``: the part is ``rate_sliding``; ``both``: the two, one
  after the other); ``--rate-processes`` the worker processes.
A run of some parts merges into the file it saves to when that file exists (each part
beside its run's metadata, ``meta_<part>``), so a part can be measured again alone.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import functools
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

import echomq
from echomq import admin, jobs
from echomq._model.codec import JSON
from echomq._scripts.keyspace import Keyspace
from echomq.testing import RedisServer

from . import files, machine
from . import tables as md
from .ceiling import redis_benchmark

__all__ = ["main", "readme", "run_lanes"]

HERE = Path(__file__).resolve().parent
LEASE_MS = 600_000
PAYLOAD = b'{"task":"noop","args":["' + b"x" * 60 + b'"],"kwargs":{}}'
BATCH = 250
WORKER_RANK_RULE = (
    "start order = rows' claimed_at (ms, server clock) after the Worker drained the queue; "
    "jobs claimed in the same ms: the small group's after the big group's, each group in "
    "enqueue order (a small job's rank is the highest its ms allows; worker_ranks_low: the "
    "lowest)"
)


async def fill(conn: echomq.Connection, queue: str, n: int, groups: int) -> None:
    """``n`` jobs, job i in group ``g<i % groups>`` (0 groups: ungrouped)."""
    for start in range(0, n, BATCH):
        batch = [
            jobs.NewJob(payload=PAYLOAD, group=f"g{i % groups}" if groups else None)
            for i in range(start, min(n, start + BATCH))
        ]
        await jobs.enqueue_many(conn, queue, batch)


def call(tag: str, i: int) -> bytes:
    """A no-op call whose first argument names the job: ``noop("<tag>-<i>")``."""
    return JSON.encode_call("noop", [f"{tag}-{i}"], {})


async def fill_group(
    conn: echomq.Connection, queue: str, tag: str, n: int, *, grouped: bool = True
) -> None:
    """``n`` no-op jobs ``noop("<tag>-<i>")``, in group ``tag`` (or ungrouped)."""
    group = tag if grouped else None
    for start in range(0, n, BATCH):
        size = min(BATCH, n - start)
        batch = [jobs.NewJob(payload=call(tag, start + i), group=group) for i in range(size)]
        await jobs.enqueue_many(conn, queue, batch)


# -- fairness -----------------------------------------------------------------------------


async def replay_claims(
    conn: echomq.Connection, queue: str, slots: int, small: int
) -> dict[str, Any]:
    """Claim like a consumer with ``slots`` slots whose jobs finish one at a time."""
    held: collections.deque[echomq.Claimed] = collections.deque()
    calls = starts = 0
    small_calls: list[int] = []
    small_starts: list[int] = []
    while len(small_calls) < small:
        want = slots - len(held)
        batch = await jobs.claim(conn, queue, LEASE_MS, count=want)
        calls += 1
        if not batch and not held:
            raise RuntimeError("the queue ran dry before the small group's jobs started")
        for job in batch:
            starts += 1
            if b'"small-' in job.payload:
                small_calls.append(calls)
                small_starts.append(starts)
            held.append(job)
        done = held.popleft()
        await jobs.complete(conn, queue, done.id, done.token, b"")
    return {"claim_calls": small_calls, "job_starts": small_starts}


async def worker_order(
    url: str, queue: str, grouped: bool, big: int, small: int
) -> tuple[list[int], list[int]]:
    """A real Worker(concurrency=8) drains the queue; then the ranks (1-based) at which the
    small jobs started, from the rows' ``claimed_at`` (ms, server clock; ties: the module's
    docstring): each small job's rank, and the lowest rank its millisecond allows."""
    q = echomq.Queue(queue, url=url)

    @q.task(name="noop")
    async def noop(tag: str) -> None:
        return None

    total = big + small
    async with q.open():
        conn = q.connection
        await fill_group(conn, queue, "big", big, grouped=grouped)
        for i in range(small):
            await noop.apply((f"small-{i}",), group="small" if grouped else None)
        worker = echomq.Worker(q, concurrency=8)
        done_key = Keyspace(queue).metrics_completed
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.serve)
            with trio.fail_after(300):
                while True:  # a server-side count: polled
                    if int(await conn.execute("HGET", done_key, "count") or 0) >= total:
                        break
                    await trio.sleep(0.05)
            worker.shutdown(grace=0)
        starts = await start_rows(conn, queue)
    if len(starts) != total:
        raise RuntimeError(f"{queue}: {len(starts)} completed rows, not {total}")
    return start_ranks(starts)


async def start_rows(conn: echomq.Connection, queue: str) -> list[tuple[int, bool, int]]:
    """Each completed job's start: (claimed_at ms, is a small-group job, its index in its
    group's enqueue order), from the rows; a job claimed more than once is refused (its
    ``claimed_at`` would be its last attempt's)."""
    ks = Keyspace(queue)
    ids = await conn.execute("ZRANGE", ks.completed, 0, -1)
    out = []
    for at in range(0, len(ids), 500):
        replies = await conn.execute_pipeline(
            [("HMGET", ks.job(i.decode()), "claimed_at", "token", "payload")
             for i in ids[at : at + 500]]
        )  # fmt: skip
        for claimed, attempts, payload in replies:
            if int(attempts) != 1:
                raise RuntimeError(f"{queue}: a job ran {int(attempts)} times")
            found = re.search(rb'"(big|small)-(\d+)"', payload)
            if found is None:
                raise RuntimeError(f"{queue}: a job that is not the benchmark's: {payload!r}")
            out.append((int(claimed), found[1] == b"small", int(found[2])))
    return out


def start_ranks(starts: list[tuple[int, bool, int]]) -> tuple[list[int], list[int]]:
    """The small jobs' ranks in the start order (claimed_at, then the small group after the
    big one, then enqueue order), and for each the lowest rank of its millisecond."""
    order = sorted(starts)
    times = [s[0] for s in order]
    ranks, lows = [], []
    for rank, (ms, is_small, _) in enumerate(order, 1):
        if is_small:
            ranks.append(rank)
            lows.append(bisect.bisect_left(times, ms) + 1)
    return ranks, lows


async def run_fairness(reps: int, log: Callable[[str], None]) -> dict[str, Any]:
    big, small, slots = 10_000, 10, 8
    out: dict[str, Any] = {"big": big, "small": small, "slots": slots}
    with RedisServer() as server:
        async with echomq.connect(server.url) as conn:
            for grouped in (True, False):
                queue = f"fair-{'g' if grouped else 'flat'}"
                await fill_group(conn, queue, "big", big, grouped=grouped)
                await fill_group(conn, queue, "small", small, grouped=grouped)
                t0 = time.perf_counter()
                replay = await replay_claims(conn, queue, slots, small)
                replay["seconds"] = round(time.perf_counter() - t0, 3)
                out[f"replay_{'grouped' if grouped else 'ungrouped'}"] = replay
                log(f"fairness replay grouped={grouped}: {replay}")
        ranks: dict[str, list[list[int]]] = {"grouped": [], "ungrouped": []}
        lows: dict[str, list[list[int]]] = {"grouped": [], "ungrouped": []}
        for rep in range(reps):
            for grouped in (True, False):
                name = "grouped" if grouped else "ungrouped"
                got, low = await worker_order(
                    server.url, f"fairw-{name}-{rep}", grouped, big, small
                )
                ranks[name].append(got)
                lows[name].append(low)
                log(f"fairness worker {name} rep {rep + 1}: small jobs started at {got} "
                    f"(their milliseconds' lowest ranks {low})")  # fmt: skip
        out["worker_ranks"] = ranks
        out["worker_ranks_low"] = lows
        out["worker_rank_rule"] = WORKER_RANK_RULE
    return out


# -- the claim with groups --------------------------------------------------------------------


async def claims_per_second(
    conn: echomq.Connection, queue: str, callers: int, calls: int, count: int
) -> tuple[float, int]:
    remaining, got = calls, 0

    async def caller() -> None:
        nonlocal remaining, got
        while remaining > 0:
            remaining -= 1
            n = len(await jobs.claim(conn, queue, LEASE_MS, count=count))
            got += n

    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(callers):
            nursery.start_soon(caller)
    return calls / (time.perf_counter() - t0), got


async def slowlog_us(
    conn: echomq.Connection, queue: str, count: int, calls: int
) -> tuple[float, float]:
    """``calls`` claims one after another; their server time (SLOWLOG): min and median us."""
    await conn.execute("CONFIG", "SET", "slowlog-log-slower-than", 0)
    await conn.execute("CONFIG", "SET", "slowlog-max-len", calls + 10)
    await conn.execute("SLOWLOG", "RESET")
    for _ in range(calls):
        await jobs.claim(conn, queue, LEASE_MS, count=count)
    log = await conn.execute("SLOWLOG", "GET", calls + 10)
    await conn.execute("CONFIG", "SET", "slowlog-log-slower-than", 10_000)
    us = [float(e[2]) for e in log if e[3][0].upper() == b"EVALSHA"]
    return min(us), statistics.median(us)


def raise_priority(server: RedisServer) -> str:
    """The private redis-server at nice -10 when allowed (a shared machine preempts it)."""
    if server.process is None:
        return "default"
    try:
        os.setpriority(os.PRIO_PROCESS, server.process.pid, -10)
    except OSError:
        return "default (not allowed to raise it)"
    return "nice -10"


async def script_calls(conn: echomq.Connection, claims: int) -> dict[str, list[float]]:
    """``INFO commandstats`` since the last reset, per claim: each command's calls and us
    (the claim script's own calls counted under their names; evalsha = the whole script)."""
    info = (await conn.execute("INFO", "commandstats")).decode()
    out: dict[str, list[float]] = {}
    for line in info.splitlines():
        if not line.startswith("cmdstat_"):
            continue
        name, rest = line[len("cmdstat_") :].split(":", 1)
        if "|" in name:  # config|set, slowlog|get...: the benchmark's own
            continue
        fields = dict(kv.split("=") for kv in rest.split(","))
        out[name] = [
            round(int(fields["calls"]) / claims, 2),
            round(float(fields["usec"]) / claims, 2),
        ]
    return out


async def usec_per_call(conn: echomq.Connection) -> float:
    info = (await conn.execute("INFO", "commandstats")).decode()
    for line in info.splitlines():
        if line.startswith("cmdstat_evalsha:"):
            fields = dict(kv.split("=") for kv in line.split(":", 1)[1].split(","))
            return float(fields["usec_per_call"])
    return float("nan")


SHAPES = (("ungrouped", 0), ("10 groups", 10), ("1,000 groups", 1000), ("10,000 groups", 10_000))
MODES = (
    ("count=1, 64 callers", 64, 1, 20_000),
    ("count=10, 32 callers", 32, 10, 3_000),
    ("count=100, 16 callers", 16, 100, 300),
)


async def run_claims(reps: int, scale: float, log: Callable[[str], None]) -> dict[str, Any]:
    rows: dict[str, dict[str, list[float]]] = {}
    ceiling: dict[str, list[float]] = {"ping_p16_c50": [], "ping_p1_c1": []}
    breakdown: dict[str, dict[str, list[float]]] = {}
    slow_calls = max(20, int(400 * scale))
    with RedisServer() as server:
        priority = raise_priority(server)
        async with echomq.connect(server.url) as conn:
            for rep in range(reps):
                await conn.execute("FLUSHALL")
                piped = await redis_benchmark(server.port, ["PING"], max(10_000, int(1e6 * scale)))
                single = await redis_benchmark(
                    server.port, ["PING"], max(1_000, int(50_000 * scale)), pipeline=1, clients=1
                )
                ceiling["ping_p16_c50"].append(piped)
                ceiling["ping_p1_c1"].append(single)
                log(f"claim rep {rep + 1} ceiling: PING -P16 -c50 {piped:,.0f}/s, "
                    f"-P1 -c1 {single:,.0f}/s")  # fmt: skip
                for mode, callers, count, base_calls in MODES:
                    calls = max(10, int(base_calls * scale))
                    for shape, groups in SHAPES:
                        await conn.execute("FLUSHALL")
                        queue = f"claim-{groups}"
                        need = (calls + slow_calls) * count + max(groups, 1) + 1000
                        await fill(conn, queue, need, groups)
                        await conn.execute("CONFIG", "RESETSTAT")
                        rate, got = await claims_per_second(conn, queue, callers, calls, count)
                        if got != calls * count:
                            raise RuntimeError(
                                f"{shape} {mode}: claimed {got}, not {calls * count}"
                            )
                        usec = await usec_per_call(conn)
                        await conn.execute("CONFIG", "RESETSTAT")
                        low, mid = await slowlog_us(conn, queue, count, slow_calls)
                        calls_of = await script_calls(conn, slow_calls)
                        row = rows.setdefault(
                            f"{mode}, {shape}",
                            {"jobs_s": [], "usec": [], "min_us": [], "median_us": []},
                        )
                        row["jobs_s"].append(rate * count)
                        row["usec"].append(usec)
                        row["min_us"].append(low)
                        row["median_us"].append(mid)
                        breakdown[f"{mode}, {shape}"] = calls_of  # the last repetition's
                        log(
                            f"claim rep {rep + 1} {mode} {shape}: {rate * count:,.0f} jobs/s, "
                            f"alone min {low:.0f} median {mid:.0f} us"
                        )
    out: dict[str, Any] = {
        "redis_priority": priority,
        "ceiling": ceiling,
        "rows": rows,
        "ratios": {},
        "script_calls": breakdown,
    }

    def ratio(a: list[float], b: list[float]) -> float:
        return statistics.median(x / y for x, y in zip(a, b, strict=True))

    for mode, *_ in MODES:
        base = rows[f"{mode}, ungrouped"]
        for shape, _groups in SHAPES[1:]:
            row = rows[f"{mode}, {shape}"]
            out["ratios"][f"{mode}: {shape} / ungrouped (jobs/s)"] = ratio(
                row["jobs_s"], base["jobs_s"]
            )
            out["ratios"][f"{mode}: {shape} / ungrouped (server us, median)"] = ratio(
                row["median_us"], base["median_us"]
            )
        ten, thousand = rows[f"{mode}, 10 groups"], rows[f"{mode}, 1,000 groups"]
        many = rows[f"{mode}, 10,000 groups"]
        out["ratios"][f"{mode}: 10,000 / 10 groups (server us, median)"] = ratio(
            many["median_us"], ten["median_us"]
        )
        out["ratios"][f"{mode}: 10,000 / 1,000 groups (server us, median)"] = ratio(
            many["median_us"], thousand["median_us"]
        )
    return out


# -- a rate limit over several worker processes ------------------------------------------------

APP = "benchmarks.apps.lanes_app:queue"


def _workers(url: str, queue: str, n: int, concurrency: int) -> list[subprocess.Popen[bytes]]:
    env = {**os.environ, "ECHOMQ_URL": url, "EMQ_BENCH_QUEUE": queue}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent), env.get("PYTHONPATH")]))
    argv = [sys.executable, "-m", "echomq", "worker", APP, "--concurrency", str(concurrency)]
    return [
        subprocess.Popen(argv, cwd=HERE.parent, env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
        for _ in range(n)
    ]  # fmt: skip


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


async def run_rate(
    reps: int,
    seconds: int,
    rate: int,
    processes: int,
    log: Callable[[str], None],
    kind: str = "fixed",
) -> dict[str, Any]:
    runs = []
    for rep in range(reps):
        with RedisServer() as server:
            raise_priority(server)
            async with echomq.connect(server.url) as conn:
                queue = f"rate-{rep}"
                backlog = rate * (seconds + 10) + 1000
                await admin.ensure_schema(conn, queue)  # (limits make no queue)
                await admin.set_rate_limit(conn, queue, rate, 1.0, kind=kind)
                await fill(conn, queue, backlog, 0)
                procs = await trio.to_thread.run_sync(_workers, server.url, queue, processes, 16)
                try:
                    done_key = Keyspace(queue).metrics_completed
                    with trio.fail_after(seconds + 60):
                        target = rate * (seconds + 2)
                        while True:  # a server-side count: polled
                            if int(await conn.execute("HGET", done_key, "count") or 0) >= target:
                                break
                            await trio.sleep(0.5)
                finally:
                    await trio.to_thread.run_sync(_stop, procs)
                starts = await claimed_at(conn, queue)
        runs.append(count_windows(starts, seconds, rate))
        log(f"rate ({kind}) rep {rep + 1}: {runs[-1]}")
    return {"rate": rate, "seconds": seconds, "processes": processes, "kind": kind, "runs": runs}


async def claimed_at(conn: echomq.Connection, queue: str) -> list[int]:
    ks = Keyspace(queue)
    ids = await conn.execute("ZRANGE", ks.completed, 0, -1)
    ids += await conn.execute("ZRANGE", ks.active, 0, -1)
    out = []
    for start in range(0, len(ids), 500):
        replies = await conn.execute_pipeline(
            [("HGET", ks.job(i.decode()), "claimed_at") for i in ids[start : start + 500]]
        )
        out += [int(r) for r in replies if r is not None]
    return sorted(out)


def count_windows(starts: list[int], seconds: int, rate: int) -> dict[str, Any]:
    first = starts[0]
    span = sum(1 for s in starts if first <= s < first + seconds * 1000)
    window0 = first // 1000 + 1  # the first whole window
    per = collections.Counter(s // 1000 for s in starts)
    whole = [per.get(window0 + k, 0) for k in range(seconds)]
    return {
        "span_starts": span,
        "span_rate": span / seconds,
        "span_error": span / (seconds * rate) - 1,
        "whole_windows_starts": sum(whole),
        "whole_windows_rate": sum(whole) / seconds,
        "whole_windows_error": sum(whole) / (seconds * rate) - 1,
        "per_window_min": min(whole),
        "per_window_max": max(whole),
        "max_any_1s": max_in_any_stretch(starts, 1000),
        "run_starts": len(starts),
        "run_ms": starts[-1] - starts[0],
    }


def max_in_any_stretch(starts: list[int], ms: int) -> int:
    """The most starts (sorted) in any half-open stretch [s, s + ms), s any start."""
    most, lo = 0, 0
    for hi, s in enumerate(starts):
        while starts[lo] <= s - ms:
            lo += 1
        most = max(most, hi - lo + 1)
    return most


# -- entry --------------------------------------------------------------------------------------


async def run_lanes(args: argparse.Namespace, *, log: Callable[[str], None]) -> dict[str, Any]:
    scale = args.scale
    out: dict[str, Any] = {}
    parts = set(args.parts.split(","))
    if "fairness" in parts:
        out["fairness"] = await run_fairness(max(1, min(args.reps, 3)), log)
    if "claim" in parts:
        out["claim"] = await run_claims(args.reps, scale, log)
    if "rate" in parts:
        kinds = ["fixed", "sliding"] if args.rate_kind == "both" else [args.rate_kind]
        for kind in kinds:
            name = "rate" if kind == "fixed" else "rate_sliding"
            out[name] = await run_rate(
                max(1, min(args.reps, 3)), args.rate_seconds, 100, args.rate_processes, log, kind
            )
    return out


def _tables(found: dict[str, Any]) -> str:
    lines: list[str] = []
    fair = found.get("fairness")
    if fair:
        g, f = fair["replay_grouped"], fair["replay_ungrouped"]
        lines += [
            "| fairness (10,000 big + 10 small ready, 8 slots) | grouped | ungrouped |",
            "|---|---|---|",
            f"| claim call that started the last small job | {g['claim_calls'][-1]} | "
            f"{f['claim_calls'][-1]} |",
            f"| job starts before the last small job (incl.) | {g['job_starts'][-1]} | "
            f"{f['job_starts'][-1]} |",
            f"| claim calls of the small jobs | {g['claim_calls']} | {f['claim_calls'][:3]}... |",
        ]
        for name in ("grouped", "ungrouped"):
            last = [ranks[-1] for ranks in fair["worker_ranks"][name]]
            low = [ranks[-1] for ranks in fair.get("worker_ranks_low", {}).get(name, [])]
            lines.append(f"| a Worker(concurrency=8): last small job's start rank, {name} | "
                         f"{last} | lowest its ms allows: {low} |")  # fmt: skip
        lines.append("")
    claim = found.get("claim")
    if claim:
        lines += [
            "| claim | jobs/s (median) | range | server us per call, alone: min / median |",
            "|---|---:|---|---:|",
        ]
        ceil = claim.get("ceiling")
        if ceil:
            for key, name in (("ping_p16_c50", "PING -P16 -c50"), ("ping_p1_c1", "PING -P1 -c1")):
                got = ceil[key]
                lines.append(
                    f"| Redis ceiling, redis-benchmark {name} (calls/s) | "
                    f"{statistics.median(got):,.0f} | {min(got):,.0f}..{max(got):,.0f} | |"
                )
        for name, row in claim["rows"].items():
            js = row["jobs_s"]
            low, mid = statistics.median(row["min_us"]), statistics.median(row["median_us"])
            lines.append(
                f"| {name} | {statistics.median(js):,.0f} | {min(js):,.0f}..{max(js):,.0f} | "
                f"{low:.0f} / {mid:.0f} |"
            )
        lines += ["", "| ratio | median |", "|---|---:|"]
        lines += [f"| {k} | {v:.2f} |" for k, v in claim["ratios"].items()]
        lines.append("")
    for part in ("rate", "rate_sliding"):
        rate = found.get(part)
        if rate:
            lines += [*_rate_table(rate), ""]
    return "\n".join(lines)


def _rate_table(rate: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    kind = f", {rate['kind']}" if "kind" in rate else ""
    lines += [
        f"| {rate['rate']}/s{kind}, {rate['processes']} worker processes | starts | rate | "
        "error | per window min..max |",
        "|---|---:|---:|---:|---|",
    ]
    for i, run in enumerate(rate["runs"]):
        lines.append(
            f"| rep {i + 1}, {rate['seconds']} whole windows | {run['whole_windows_starts']} | "
            f"{run['whole_windows_rate']:.2f}/s | {run['whole_windows_error']:+.2%} | "
            f"{run['per_window_min']}..{run['per_window_max']} |"
        )
        lines.append(
            f"| rep {i + 1}, {rate['seconds']} s from the first start | {run['span_starts']} | "
            f"{run['span_rate']:.2f}/s | {run['span_error']:+.2%} | |"
        )
        if "max_any_1s" in run:
            over = (
                f", slid over all {run['run_starts']} starts ({run['run_ms'] / 1000:.1f} s)"
                if "run_ms" in run
                else ""
            )
            lines.append(
                f"| rep {i + 1}, the most starts in any 1 s window{over} | "
                f"**{run['max_any_1s']}** | | | |"
            )
    return lines


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks lanes",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--parts", default="fairness,claim,rate", help="which parts")
    p.add_argument("--rate-seconds", type=int, default=30, help="the rate run's length")
    p.add_argument(
        "--rate-kind", choices=("fixed", "sliding", "both"), default="fixed", help="the limiter"
    )
    p.add_argument("--rate-processes", type=int, default=3, help="the rate run's workers")
    p.add_argument("--scale", type=float, default=1.0, help="multiply the claim's counts")
    files.add_arguments(p, reps=5)
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    meta = machine.describe("lanes", argv)
    found = trio.run(functools.partial(run_lanes, args, log=machine.log))
    path = files.target("lanes", args)
    doc = files.load(path) if path.exists() else {}
    doc.update(found)
    for part in found:  # each part's figures beside the run that measured them
        doc[f"meta_{part}"] = machine.finish(dict(meta))
    files.write(path, doc)
    print(_tables(found), flush=True)


def readme(doc: dict[str, Any], source: str) -> str:
    lines = []
    for part in ("fairness", "claim", "rate", "rate_sliding"):
        if f"meta_{part}" in doc:
            lines.append(f"{part}: " + md.conditions(doc[f"meta_{part}"]))
    lines.append(f"From `{source}`.")
    return "\n".join(f"- {line}" if i < len(lines) - 1 else line
                     for i, line in enumerate(lines)) + "\n\n" + _tables(doc)  # fmt: skip


if __name__ == "__main__":
    main()
