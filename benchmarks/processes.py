"""One supervised ``--processes 2`` against 2 separately started workers, on one backlog.

    python -m benchmarks processes [--jobs 20000] [--processes 2] [--concurrency 100]
        [--reps 3] [--publish]

Per repetition and mode, in turns (each goes first in turn): a flushed private
redis-server, N no-op jobs enqueued in bulk by the peers' echomq adapter, then the
workers: ``supervised``, one ``echomq worker peer_echomq:queue --processes P``;
``separate``, P ``echomq worker peer_echomq:queue`` started side by side, each in a session
of its own. The rate is the adapter's drain rate (completions from the first seen to the
last). The CPU figures (/proc) count from the moment all P workers are serving (their
heartbeat records) to the last completion, per job completed in that stretch: every
worker process's (the supervisor and its children, or the P workers), the redis-server's,
and the first process's alone (the supervisor, or the first separate worker). Then
SIGTERM (to the supervisor, or to each) and the exit codes. The machine's busy share
(/proc/stat) over the same stretch is recorded beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis

from echomq._scripts.keyspace import Keyspace
from echomq.testing import RedisServer

from . import files, harness, machine, tables, turns

ADAPTERS = harness.HERE
MODES = ("supervised", "separate")
_FILL = "import _common, peer_echomq as a; _common.main(a)"
QUEUE = "bench"  # the adapter's queue (adapters/peer_echomq.py)


def _busy() -> list[int]:
    return [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]


def _workers(mode: str, url: str, processes: int, concurrency: int) -> list[list[str]]:
    base = [sys.executable, "-m", "echomq", "worker", "peer_echomq:queue", "--url", url]
    base += ["--concurrency", str(concurrency), "--grace", "5"]
    if mode == "supervised":
        return [[*base, "--processes", str(processes)]]
    return [base for _ in range(processes)]


def _tree_cpu(roots: list[int]) -> float:
    """CPU seconds of the live processes ``roots`` and all their descendants (a
    supervisor's children run in sessions of their own: a process group misses them)."""
    table = harness.proc_table()
    inside = set(roots)
    grew = True
    while grew:
        grew = False
        for pid, (ppid, _, _) in table.items():
            if ppid in inside and pid not in inside:
                inside.add(pid)
                grew = True
    return sum(table[pid][2] for pid in inside if pid in table) / os.sysconf("SC_CLK_TCK")


def one(
    url: str, server_pid: int, mode: str, jobs: int, processes: int, concurrency: int
) -> dict[str, Any]:
    """One drain of ``jobs`` prefilled jobs by the workers of ``mode``; the CPU figures
    count from the moment every worker process is serving (start-up left out), per job
    completed since."""
    # the adapters first, then the caller's path (the tree measured: its src/ when given)
    path = os.pathsep.join(p for p in (str(ADAPTERS), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, PYTHONPATH=path, PYTHONUNBUFFERED="1", BENCH_URL=url)
    fill = [sys.executable, "-c", _FILL, "drain", "--url", url, "--jobs", str(jobs)]
    drain = subprocess.Popen(fill, cwd=ADAPTERS, env=env, stdout=subprocess.PIPE)
    assert drain.stdout is not None
    drain.stdout.readline()  # prefilled
    out = subprocess.DEVNULL
    workers = [
        subprocess.Popen(cmd, cwd=ADAPTERS, env=env, stdout=out, stderr=out,
                         start_new_session=True)
        for cmd in _workers(mode, url, processes, concurrency)
    ]  # fmt: skip
    roots = [w.pid for w in workers]
    try:
        r = redis.Redis.from_url(url)
        done_key = Keyspace(QUEUE).metrics_completed
        deadline = time.monotonic() + 60
        while r.zcard(Keyspace(QUEUE).workers) < processes:  # their heartbeat records
            if time.monotonic() > deadline:
                raise RuntimeError(f"{mode}: {processes} workers not serving within 60 s")
            time.sleep(0.05)
        b0, c0 = _busy(), _tree_cpu(roots)
        s0, top0 = harness.process_cpu(server_pid), harness.process_cpu(workers[0].pid)
        done0 = int(r.hget(done_key, "count") or 0)
        got = json.loads(drain.communicate(timeout=900)[0].decode().strip().splitlines()[-1])
        b1, c1 = _busy(), _tree_cpu(roots)
        s1, top1 = harness.process_cpu(server_pid), harness.process_cpu(workers[0].pid)
        done = int(r.hget(done_key, "count") or 0) - done0
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        codes = [w.wait(timeout=60) for w in workers]
        if drain.poll() is None:
            drain.kill()
            drain.wait()
    d = [b - a for a, b in zip(b0, b1, strict=True)]
    return {
        "drain_per_s": got["drain_per_s"],
        "machine_busy": 1 - (d[3] + d[4]) / sum(d),
        "cpu_jobs": done,  # completed while every worker process served
        "worker_us_per_job": (c1 - c0) / done * 1e6,
        "redis_us_per_job": (s1 - s0) / done * 1e6,
        # the supervisor's own CPU (supervised), or the first worker's (separate)
        "first_process_us_per_job": (top1 - top0) / done * 1e6,
        "exit_codes": codes,
    }


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks processes",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--jobs", type=int, default=20_000, help="the backlog (default 20,000)")
    p.add_argument("--processes", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--concurrency", type=int, default=100, help="per process (default 100)")
    files.add_arguments(p, reps=3)
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    meta = machine.describe("processes", argv)
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    with RedisServer() as server:
        assert server.process is not None
        pid = server.process.pid
        r = redis.Redis.from_url(server.url)
        for rep in range(args.reps):
            for mode in turns.rotate(MODES, rep):
                r.flushall()
                got = one(server.url, pid, mode, args.jobs, args.processes, args.concurrency)
                runs[mode].append(got)
                print(
                    f"rep {rep} {mode:>10}: {got['drain_per_s']:,.0f} jobs/s, "
                    f"busy {got['machine_busy']:.2f}, exit codes {got['exit_codes']}",
                    flush=True,
                )
    median = {m: statistics.median(x["drain_per_s"] for x in xs) for m, xs in runs.items()}
    ratios = [
        a["drain_per_s"] / b["drain_per_s"]
        for a, b in zip(runs["supervised"], runs["separate"], strict=True)
    ]
    for mode, rate in median.items():
        print(f"median {mode:>10}: {rate:,.0f} jobs/s")
    print("supervised / separate, per repetition: " + " ".join(f"{x:.2f}" for x in ratios))
    doc = {
        "meta": machine.finish(meta),
        "jobs": args.jobs,
        "processes": args.processes,
        "concurrency": args.concurrency,
        "reps": args.reps,
        "median": median,
        "ratios": ratios,
        "runs": runs,
    }
    files.save("processes", doc, args)


def readme(doc: dict[str, Any], source: str) -> str:
    """The README's table: each mode's drain rate per repetition, and supervised /
    separate within each repetition, with the medians."""
    runs = doc["runs"]
    reps = len(runs["supervised"])
    p = doc["processes"]
    extra = (
        f"A backlog of {doc['jobs']:,} jobs, drained by {p} worker processes of concurrency "
        f"{doc['concurrency']}: one `echomq worker --processes {p}` (supervised) or {p} "
        "`echomq worker` started side by side (separate), in turns. The CPU per job counts "
        f"from the moment the {p} workers all serve to the last completion (/proc; a tick is "
        "10 ms)."
        if "worker_us_per_job" in runs["supervised"][0]
        else "`echomq worker` started side by side (separate), in turns."
    )
    head = ["", *(f"rep {r + 1}" for r in range(reps)), "median"]
    rows = []
    for mode in MODES:
        rates = [x["drain_per_s"] for x in runs[mode]]
        rows.append([f"{mode}: drain jobs/s", *map(tables.num, rates),
                     f"**{tables.num(statistics.median(rates))}**"])  # fmt: skip
    ratios = [
        a["drain_per_s"] / b["drain_per_s"]
        for a, b in zip(runs["supervised"], runs["separate"], strict=True)
    ]
    rows.append(["supervised / separate, drain jobs/s", *(f"{x:.2f}" for x in ratios),
                 f"**{statistics.median(ratios):.2f}**"])  # fmt: skip
    if all("worker_us_per_job" in x for m in MODES for x in runs[m]):
        for key, label in (
            ("worker_us_per_job", "worker CPU µs per job (every worker process)"),
            ("redis_us_per_job", "redis-server CPU µs per job"),
        ):
            for mode in MODES:
                got = [x[key] for x in runs[mode]]
                rows.append([f"{mode}: {label}", *(f"{v:.1f}" for v in got),
                             f"{statistics.median(got):.1f}"])  # fmt: skip
            cpu = [
                a[key] / b[key] for a, b in zip(runs["supervised"], runs["separate"], strict=True)
            ]
            name = label.split(" (")[0]
            rows.append([f"supervised / separate, {name}", *(f"{x:.2f}" for x in cpu),
                         f"**{statistics.median(cpu):.2f}**"])  # fmt: skip
        own = [x["first_process_us_per_job"] for x in runs["supervised"]]
        rows.append(["the supervisor alone: CPU µs per job", *(f"{v:.1f}" for v in own),
                     f"**{statistics.median(own):.1f}**"])  # fmt: skip
    for mode in MODES:
        busy = [x["machine_busy"] for x in runs[mode]]
        rows.append([f"{mode}: machine busy", *(f"{x:.2f}" for x in busy),
                     f"{statistics.median(busy):.2f}"])  # fmt: skip
    for mode in MODES:
        codes = [" ".join(map(str, x["exit_codes"])) for x in runs[mode]]
        rows.append([f"{mode}: exit codes after SIGTERM", *codes, ""])
    return "\n".join(
        [
            tables.conditions(tables.meta_of(doc), reps=reps, source=source, extra=extra),
            "",
            tables.markdown(head, rows),
        ]
    )


if __name__ == "__main__":
    main()
