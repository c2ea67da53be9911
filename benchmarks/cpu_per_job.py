"""CPU per job of the worker process and of redis-server while a fresh worker drains a backlog.

    python -m benchmarks cpu_per_job [--jobs 20000] [--reps 3] [--base REV|SRC --base-name main]
        [--system bullmq-node] [--hooks 3] [--publish]

The ``drain`` figure's scenario, with echomq's own benchmark adapter.

Per repetition: a private redis-server, N jobs enqueued in bulk, then a worker process
that was started (imports done) before the clock starts; CPU seconds from /proc of the
worker and of the server between the start signal and the last completion, divided by N.
``--base``: a second echomq, a git revision or a folder holding its package, measured in
turns with this one, so both see the same machine load. The machine's busy
share (/proc/stat) is recorded too: on a 2-core box a drain is CPU bound when it is near 1,
and its rate then follows the CPU per job of both processes.

``--hooks K``: this tree's worker with K no-op hooks on its queue (cycling through an async
``around_run`` that awaits ``call_next()``, a plain ``on_complete`` and an async one: each
fires on every job), measured in turns with the same worker without hooks.

``--system bullmq-node``: BullMQ's Node worker (the peers benchmark's adapter, held by a
small wrapper until its modules are loaded) measured in turns with echomq's, on the same
server. Every repetition also samples both processes and the completed count every 5 ms:
the ``*_run`` figures are taken from the first completion seen to the last (the window the
peers benchmark's drain rate uses, without the worker's start), and ``calls_per_job`` is
the server's INFO commandstats delta over the drain (commands inside scripts included).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from echomq._scripts.keyspace import Keyspace
from echomq.testing import RedisServer

from . import files, harness, machine, tables, turns

ADAPTERS = harness.HERE
_ADAPTER = "import _common, peer_echomq as a; "
_WORKER = _ADAPTER + "import sys; print('ready', flush=True); sys.stdin.readline(); _common.main(a)"
# BullMQ's adapter (argv[1]) run once stdin says go; bullmq and ioredis loaded before
_NODE_WORKER = (
    "require('bullmq'); require('ioredis'); process.stdout.write('ready\\n');"
    " process.stdin.once('data', () => require(process.argv[1]));"
)
SYSTEMS = ("echomq", "bullmq-node")
QUEUE = "bench"  # the adapters' queue name
SAMPLE_S = 0.005


def _cpu(pid: int, thread: int | None = None) -> float:
    """CPU seconds of process ``pid`` (all its threads), or of one of its threads."""
    where = f"/proc/{pid}" if thread is None else f"/proc/{pid}/task/{thread}"
    fields = Path(f"{where}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _busy() -> list[int]:
    return [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]


def _done_counter(system: str) -> Callable[[redis.Redis], int]:
    """How many jobs are done, read the way the system's adapter counts them in a drain."""
    if system == "bullmq-node":
        return lambda r: int(r.zcard(f"bull:{QUEUE}:completed"))
    key = Keyspace(QUEUE).metrics_completed
    return lambda r: int(r.hget(key, "count") or 0)


def _commands(stats: dict[str, Any], field: str = "calls") -> dict[str, int]:
    """INFO commandstats as {command: calls} (or another of its fields: ``usec``)."""
    return {k.removeprefix("cmdstat_"): int(v[field]) for k, v in stats.items()}


def per_job_calls(
    before: dict[str, int], after: dict[str, int], jobs: int, *, least: float = 0.01
) -> dict[str, float]:
    """Per job: the growth of each command's count that grew by at least ``least``."""
    out = {}
    for name, calls in sorted(after.items()):
        d = calls - before.get(name, 0)
        if d >= jobs * least:
            out[name] = round(d / jobs, 3)
    return out


def server_cpu(r: redis.Redis) -> float:
    """redis-server's CPU seconds (INFO cpu: getrusage, finer than /proc's clock ticks)."""
    info = r.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


Sample = tuple[float, int, float, float, float]  # time, done, worker, server, worker's main


def run_window(samples: list[Sample], jobs: int) -> dict[str, float]:
    """From (time, done, worker cpu, server cpu, worker's main thread cpu) samples: the rate
    and CPU per job from the first sample that saw a completion to the first that saw all
    ``jobs`` (the window of the peers benchmark's drain rate)."""
    first = next((s for s in samples if s[1] > 0), None)
    last = next((s for s in samples if s[1] >= jobs), None)
    if first is None or last is None or last[0] <= first[0] or last[1] <= first[1]:
        return {}
    n = last[1] - first[1]
    return {
        "drain_per_s_run": n / (last[0] - first[0]),
        "worker_us_per_job_run": (last[2] - first[2]) / n * 1e6,
        "redis_us_per_job_run": (last[3] - first[3]) / n * 1e6,
        # the worker's main thread alone (Node's GC and libuv threads run beside it)
        "worker_main_us_per_job_run": (last[4] - first[4]) / n * 1e6,
    }


class _Sampler(threading.Thread):
    """Every ``SAMPLE_S``: the time, the done count, and both processes' CPU seconds."""

    def __init__(self, url: str, system: str, pids: tuple[int, int], jobs: int) -> None:
        super().__init__(daemon=True)
        self.r = redis.Redis.from_url(url)
        self.count = _done_counter(system)
        self.pids, self.jobs = pids, jobs
        self.samples: list[Sample] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            t, c = time.perf_counter(), self.count(self.r)
            w, s = _cpu(self.pids[0]), _cpu(self.pids[1])
            self.samples.append((t, c, w, s, _cpu(self.pids[0], self.pids[0])))
            if c >= self.jobs:
                return
            self.stop.wait(SAMPLE_S)


def _commands_of(
    system: str, url: str, jobs: int, src: str | None
) -> tuple[list[str], list[str], dict[str, str], Path]:
    """(prefill-and-watch argv, held worker argv, env, cwd) for one drain of ``system``."""
    if system == "bullmq-node":
        ns = argparse.Namespace(concurrency=100, latency_seconds=20.0)
        fill = harness._argv(system, "drain", url, ns, jobs)
        serve = harness._argv(system, "worker", url, ns, 0)
        serve = [serve[0], "-e", _NODE_WORKER, *serve[1:]]
        return fill, serve, harness._env(system, url, ns), harness.HERE
    path = os.pathsep.join(p for p in (str(ADAPTERS), src) if p)
    env = dict(os.environ, PYTHONPATH=path, PYTHONUNBUFFERED="1")
    py = sys.executable
    fill = [py, "-c", _ADAPTER + "_common.main(a)", "drain", "--url", url, "--jobs", str(jobs)]
    return fill, [py, "-c", _WORKER, "worker", "--url", url], env, ADAPTERS


def one(
    url: str,
    server_pid: int,
    jobs: int,
    src: str | None,
    system: str = "echomq",
    hooks: int = 0,
) -> dict[str, Any]:
    """One drain of ``jobs`` prefilled jobs by a fresh worker of ``system`` (echomq's with
    ``hooks`` no-op hooks on its queue)."""
    fill, serve, env, cwd = _commands_of(system, url, jobs, src)
    if hooks:
        env = dict(env, BENCH_HOOKS=str(hooks))
    drain = subprocess.Popen(fill, cwd=cwd, env=env, stdout=subprocess.PIPE)
    worker = subprocess.Popen(
        serve, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert drain.stdout is not None and worker.stdout is not None and worker.stdin is not None
    r = redis.Redis.from_url(url)
    try:
        drain.stdout.readline()  # prefilled
        worker.stdout.readline()  # imported, not serving yet
        sampler = _Sampler(url, system, (worker.pid, server_pid), jobs)
        i0 = r.info("commandstats")
        b0, w0, s0, x0 = _busy(), _cpu(worker.pid), _cpu(server_pid), server_cpu(r)
        sampler.start()
        worker.stdin.write(b"go\n")
        worker.stdin.flush()
        out = json.loads(drain.communicate(timeout=600)[0].decode().strip().splitlines()[-1])
        w1, s1, b1, x1 = _cpu(worker.pid), _cpu(server_pid), _busy(), server_cpu(r)
        i1 = r.info("commandstats")
        sampler.stop.set()
        sampler.join()
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        if drain.poll() is None:
            drain.kill()
            drain.wait()
    d = [b - a for a, b in zip(b0, b1, strict=True)]
    return {
        "drain_per_s": out["drain_per_s"],
        "worker_us_per_job": (w1 - w0) / jobs * 1e6,
        "redis_us_per_job": (s1 - s0) / jobs * 1e6,
        "machine_busy": 1 - (d[3] + d[4]) / sum(d),
        **run_window(sampler.samples, jobs),
        "redis_us_per_job_rusage": (x1 - x0) / jobs * 1e6,  # INFO cpu: finer than ticks
        "calls_per_job": per_job_calls(_commands(i0), _commands(i1), jobs),
        "command_us_per_job": per_job_calls(
            _commands(i0, "usec"), _commands(i1, "usec"), jobs, least=0.05
        ),
    }


def _line(got: dict[str, Any]) -> str:
    return "  ".join(f"{k} {v:,.2f}" for k, v in got.items() if isinstance(v, float | int))


def median_of(xs: list[dict[str, Any]]) -> dict[str, float]:
    """The median of each numeric figure over the repetitions that have it."""
    keys = dict.fromkeys(k for x in xs for k, v in x.items() if isinstance(v, float | int))
    return {k: statistics.median(x[k] for x in xs if k in x) for k in keys}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks cpu_per_job",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--jobs", type=int, default=20_000, help="the backlog (default 20,000)")
    p.add_argument("--base", help="another echomq (git revision or src folder), in turns")
    p.add_argument("--base-name", default="base", help="its name in the tables")
    p.add_argument(
        "--system", choices=SYSTEMS[1:], action="append", default=[],
        help="a peer's worker measured in turns with echomq's (its adapter in benchmarks/adapters)",
    )  # fmt: skip
    p.add_argument(
        "--hooks", type=int, default=0,
        help="also this tree's worker with K no-op hooks, in turns with none",
    )  # fmt: skip
    files.add_arguments(p, reps=3)
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    meta = machine.describe("cpu_per_job", argv)
    trees: dict[str, str | None] = {"this": None}
    if args.base:
        trees = {args.base_name: str(turns.src_of(args.base)), "this": None}
    entries = [(n, "echomq", s) for n, s in trees.items()]
    hooked = f"hooks{args.hooks}" if args.hooks else None
    if hooked is not None:
        entries.append((hooked, "echomq", None))
    entries += [(name, name, None) for name in args.system]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in entries}
    with RedisServer() as server:
        assert server.process is not None
        r = redis.Redis.from_url(server.url)
        for rep in range(args.reps):
            for name, system, src in turns.rotate(entries, rep):
                r.flushall()
                r.config_resetstat()
                hooks = args.hooks if name == hooked else 0
                got = one(server.url, server.process.pid, args.jobs, src, system, hooks)
                runs[name].append(got)
                print(f"rep {rep} {name:>8}: " + _line(got), flush=True)
    summary = {name: median_of(xs) for name, xs in runs.items()}
    for name, med in summary.items():
        print(f"median {name:>8}: " + _line(med))
    doc = {
        "meta": machine.finish(meta),
        "jobs": args.jobs,
        "reps": args.reps,
        "trees": list(trees),
        "systems": args.system,
        "median": summary,
        "runs": runs,
    }
    files.save("cpu_per_job", doc, args)


FIGURES = (
    ("drain_per_s", "drain jobs/s", None),
    ("worker_us_per_job", "worker µs per job", 1),
    ("redis_us_per_job", "redis-server µs per job", 1),
    ("machine_busy", "machine busy", 2),
)


def readme(doc: dict[str, Any], source: str) -> str:
    runs: dict[str, list[dict[str, Any]]] = doc["runs"]
    head = ["", *runs]
    rows = [
        [title, *(tables.num(tables.median(x[key] for x in xs), digits) for xs in runs.values())]
        for key, title, digits in FIGURES
    ]
    out = tables.markdown(head, rows)
    per_rep = []
    for other in (n for n in runs if n != "this" and "this" in runs):
        # a hooked worker against the same one without hooks; any other against this one
        top, bottom = (other, "this") if other.startswith("hooks") else ("this", other)
        pairs = list(zip(runs[top], runs[bottom], strict=False))
        per_rep += [
            [
                f"{title}, {top} / {bottom}",
                " ".join(f"{a[key] / b[key]:.2f}" for a, b in pairs if b.get(key)),
            ]
            for key, title, _ in FIGURES[:3]
        ]
    if per_rep:
        out += "\n\n" + tables.markdown(("in each repetition", "ratio"), per_rep)
    jobs = f"A backlog of {doc['jobs']:,} jobs, drained by a fresh worker process."
    meta = tables.meta_of(doc)
    return tables.conditions(meta, reps=doc.get("reps"), source=source, extra=jobs) + "\n\n" + out


if __name__ == "__main__":
    main()
