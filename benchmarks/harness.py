"""Run one adapter (a peer, or echomq itself) through every mode on redis-servers of its own:
the machinery of ``peers``, ``e2e`` and ``cpu_per_job``.

Per adapter and repetition (``run_adapter``), each mode on a fresh private redis-server
(persistence off):

- ``enqueue``: one job at a time, no worker running -> enqueue/s (at most 2,000 jobs);
- ``bulk``: the peer's bulk enqueue API in chunks of 1,000, no worker -> jobs/s (peers
  without one: :data:`benchmarks.adapters.NO_BULK`);
- ``produce`` then ``latency``: the worker process(es) started the way the adapter documents,
  N jobs enqueued while it runs (clock stops when all are done), then enqueue -> result
  round trips one at a time;
- ``drain``: N jobs enqueued with no worker, then a freshly started worker drains them; the
  rate is taken from the first completion seen to the last (10,000, and 100,000 where the
  system's 10,000 prefill + drain of the same repetition projects the 100,000 ones under 2
  minutes). A mode that fails is recorded in the notes; the other modes still count;
- ``io``: the drain again with a job that awaits a sleep (``--io-sleep-ms``, 10) at a high
  concurrency (``--io-concurrency``, 1,000), ``--io-jobs`` (30,000) jobs; only for the
  adapters that read ``--sleep`` (:data:`IO_SYSTEMS`).

Every drain also answers, over the window of its rate (the adapter prints a line at the
poll that saw the first completion and at the one that saw all N): the CPU per job of the
worker's process group and of redis-server (utime + stime from /proc), and Redis's memory
per finished job kept (``used_memory`` once all N are done, minus ``used_memory`` of the
fresh server before the backlog, over N; default retention).

Workers are stopped with SIGTERM to their process group, then SIGKILL. Python adapters run
from the adapters folder with ``python -c`` so that the worker CLIs import them by their module name
(``peer_<name>``); the Node adapter is ``node bullmq-node.cjs`` with ``NODE_PATH`` at its
``benchmarks/.peers/bullmq-node/node_modules``. Adapters live in :mod:`benchmarks.adapters`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import redis
import trio

from echomq.testing import RedisServer

from . import turns
from .adapters import PEERS
from .adapters.venvs import ensure, node_modules
from .ceiling import redis_benchmark
from .files import LOGS
from .stats import Results, percentile

__all__ = [
    "FIGURES",
    "IO_SYSTEMS",
    "add_arguments",
    "add_io_arguments",
    "ceilings",
    "enqueue_once",
    "io_capable",
    "process_cpu",
    "record",
    "run_adapter",
]

HERE = Path(__file__).resolve().parent / "adapters"
BIG_DRAIN = 100_000
BIG_DRAIN_LIMIT_S = 120.0  # run the 100,000 drain only where prefill + drain projects less
IO_SYSTEMS = ("echomq", "bullmq-node")  # adapters whose worker reads --sleep (and echomq@REV)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The modes' sizes, shared by every benchmark that runs adapters."""
    p.add_argument("--jobs", type=int, default=10_000, help="end to end: jobs (default 10,000)")
    p.add_argument("--drain-jobs", type=int, default=10_000, help="the backlog to drain")
    p.add_argument(
        "--no-big-drain",
        dest="big_drain",
        action="store_false",
        help=f"skip the {BIG_DRAIN:,}-job drain (else run where projected under 2 minutes)",
    )
    p.add_argument("--bulk-jobs", type=int, default=10_000, help="jobs for the bulk figure")
    p.add_argument("--latency-jobs", type=int, default=500, help="round trips for the latency")
    p.add_argument(
        "--latency-seconds",
        type=float,
        default=20.0,
        help="stop the round trips after this long once 20 are in (slow pollers)",
    )
    p.add_argument("--concurrency", type=int, default=100, help="worker concurrency (all)")


def add_io_arguments(p: argparse.ArgumentParser) -> None:
    """The I/O-bound drain's sizes (the ``io`` mode)."""
    p.add_argument(
        "--io-jobs", type=int, default=30_000, help="I/O-bound drain: the backlog (0: skip it)"
    )
    p.add_argument(
        "--io-sleep-ms", type=float, default=10.0, help="I/O-bound drain: each job's sleep"
    )
    p.add_argument(
        "--io-concurrency", type=int, default=1000, help="I/O-bound drain: worker concurrency"
    )


def io_capable(name: str) -> bool:
    """Whether ``name``'s adapter runs the I/O-bound job (its worker reads ``--sleep``)."""
    return _is_echomq(name) or name in IO_SYSTEMS


def _is_echomq(name: str) -> bool:
    """``echomq`` (the tree the harness runs from) or ``echomq@REV`` (a commit of it)."""
    return name == "echomq" or name.startswith("echomq@")


def _kind(name: str) -> str:
    return "python" if _is_echomq(name) else PEERS[name].kind


def echomq_snapshot(name: str) -> Path:
    """``echomq@REV``: REV's src/ exported (:func:`benchmarks.turns.snapshot`); it goes first
    on the adapter's PYTHONPATH, so that a before/after comparison runs both in one rotation
    (the same adapter, the same load)."""
    return turns.snapshot(name.split("@", 1)[1])


def _program(name: str) -> list[str]:
    if _is_echomq(name):
        return [sys.executable, "-c", "import _common, peer_echomq as a; _common.main(a)"]
    peer = PEERS[name]
    if peer.kind == "node":
        return [str(ensure(peer)), str(HERE / f"{name}.cjs")]
    code = f"import _common, {peer.module} as a; _common.main(a)"
    return [str(ensure(peer)), "-c", code]


def _argv(
    name: str,
    role: str,
    url: str,
    args: argparse.Namespace,
    jobs: int,
    *,
    concurrency: int | None = None,
    sleep: float = 0.0,
) -> list[str]:
    out = [
        *_program(name),
        role,
        "--url",
        url,
        "--jobs",
        str(jobs),
        "--concurrency",
        str(concurrency or args.concurrency),
        "--latency-seconds",
        str(args.latency_seconds),
    ]
    return [*out, "--sleep", repr(sleep)] if sleep else out


def _env(
    name: str, url: str, args: argparse.Namespace, *, concurrency: int | None = None
) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        BENCH_URL=url,
        BENCH_CONCURRENCY=str(concurrency or args.concurrency),
        PYTHONUNBUFFERED="1",
    )
    if _kind(name) == "node":
        env["NODE_PATH"] = str(node_modules(PEERS[name]))
        return env
    bindir = str(Path(_program(name)[0]).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    # adapters import as ``peer_<name>``; echomq's own adapter keeps the caller's PYTHONPATH
    # (a snapshot's src/ when measuring a fixed commit)
    snapshot = str(echomq_snapshot(name) / "src") if name.startswith("echomq@") else ""
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(HERE), snapshot, env.get("PYTHONPATH", "")) if p
    )
    env.pop("VIRTUAL_ENV", None)
    return env


async def _role(name: str, role: str, url: str, args: argparse.Namespace, jobs: int) -> Any:
    argv = _argv(name, role, url, args, jobs)
    with trio.fail_after(900):
        done = await trio.run_process(
            argv,
            cwd=HERE,
            env=_env(name, url, args),
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace")[-1500:]
        raise RuntimeError(f"{name} {role} exited {done.returncode}: {tail}")
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


def _start_workers(
    name: str,
    url: str,
    args: argparse.Namespace,
    count: int,
    tag: str,
    *,
    concurrency: int | None = None,
    sleep: float = 0.0,
) -> list[subprocess.Popen[bytes]]:
    LOGS.mkdir(parents=True, exist_ok=True)
    procs = []
    for i in range(count):
        log = open(LOGS / f"{name}-{tag}-worker{i}.log", "wb")
        procs.append(
            subprocess.Popen(
                _argv(name, "worker", url, args, 0, concurrency=concurrency, sleep=sleep),
                cwd=HERE,
                env=_env(name, url, args, concurrency=concurrency),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: the CLIs fork children
            )
        )
        log.close()
    return procs


def _stop_workers(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 15
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        try:  # the group may outlive its leader (pool children): end it by its id
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()


def _ticks(pid: int) -> int:
    """utime + stime of process ``pid`` (all its threads), in clock ticks; 0 once gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0
    return int(fields[11]) + int(fields[12])


def process_cpu(pid: int) -> float:
    """CPU seconds of process ``pid`` (utime + stime, all its threads)."""
    return _ticks(pid) / os.sysconf("SC_CLK_TCK")


def proc_table() -> dict[int, tuple[int, int, int]]:
    """Every live process: pid -> (parent pid, process group, CPU ticks: utime + stime),
    read from /proc (a process that ends while it is read is left out)."""
    table: dict[int, tuple[int, int, int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        table[int(entry.name)] = (int(fields[1]), int(fields[2]), int(fields[11]) + int(fields[12]))
    return table


def group_cpu(pgid: int) -> float:
    """CPU seconds of the live processes of process group ``pgid`` (a worker started in a
    session of its own, with any children it forked)."""
    ticks = sum(t for _, group, t in proc_table().values() if group == pgid)
    return ticks / os.sysconf("SC_CLK_TCK")


MEMORY_FIELDS = ("used_memory", "used_memory_dataset", "mem_clients_normal")


def memory(url: str) -> dict[str, int]:
    """Redis's ``used_memory`` and two of its parts (INFO memory: the dataset, the normal
    clients' buffers), bytes; and the number of keys."""
    with redis.Redis.from_url(url) as r:
        info = r.info("memory")
        found = {k: int(info[k]) for k in MEMORY_FIELDS if k in info}
        found["keys"] = int(r.dbsize())
    return found


async def _drain(
    name: str,
    server: RedisServer,
    args: argparse.Namespace,
    jobs: int,
    tag: str,
    *,
    concurrency: int | None = None,
    sleep: float = 0.0,
) -> dict[str, Any]:
    """Prefill ``jobs`` with no worker, start a fresh worker on the adapter's
    ``{"prefilled": N}`` line, answer the adapter's drain figures with the CPU per job of
    the worker and of redis-server between its ``first`` and ``last`` lines, and Redis's
    memory per job kept (``used_memory`` at ``last`` minus before the backlog, over N)."""
    url = server.url
    assert server.process is not None
    redis_pid = server.process.pid
    clk = os.sysconf("SC_CLK_TCK")
    mem0 = memory(url)
    argv = _argv(name, "drain", url, args, jobs)
    LOGS.mkdir(parents=True, exist_ok=True)
    with (LOGS / f"{name}-{tag}-drain.log").open("wb") as errors:
        proc = await trio.lowlevel.open_process(
            argv,
            cwd=HERE,
            env=_env(name, url, args),
            stdout=subprocess.PIPE,
            stderr=errors,
            stdin=subprocess.DEVNULL,
        )
    workers: list[subprocess.Popen[bytes]] = []
    marks: dict[str, tuple[int, float, float]] = {}  # line -> (done, worker s, redis s)
    figs: dict[str, Any] = {}
    out = b""
    try:
        assert proc.stdout is not None
        with trio.fail_after(900):
            while True:
                while b"\n" not in out:
                    chunk = await proc.stdout.receive_some()
                    if not chunk:
                        break
                    out += chunk
                if b"\n" not in out:
                    break
                line, out = out.split(b"\n", 1)
                msg = json.loads(line)
                if "prefilled" in msg:
                    workers = _start_workers(
                        name, url, args, 1, tag, concurrency=concurrency, sleep=sleep
                    )
                elif "first" in msg or "last" in msg:
                    key = "first" if "first" in msg else "last"
                    w = sum(group_cpu(p.pid) for p in workers)
                    marks[key] = (int(msg[key]), w, _ticks(redis_pid) / clk)
                    if key == "last":
                        mem1 = memory(url)
                        figs["mem_b_per_job"] = (mem1["used_memory"] - mem0["used_memory"]) / jobs
                        figs["memory"] = {"before": mem0, "after": mem1}
                else:
                    figs.update(msg)
            code = await proc.wait()
        if not workers:
            raise RuntimeError(f"{name} drain: no prefilled line: {out[-300:]!r}")
        if code != 0 or "drain_per_s" not in figs:
            raise RuntimeError(f"{name} drain exited {code}: see {LOGS}/{name}-{tag}-drain.log")
        if "first" in marks and "last" in marks and marks["last"][0] > marks["first"][0]:
            (c0, w0, r0), (c1, w1, r1) = marks["first"], marks["last"]
            figs["worker_us_per_job"] = (w1 - w0) / (c1 - c0) * 1e6
            figs["redis_us_per_job"] = (r1 - r0) / (c1 - c0) * 1e6
        return figs
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await trio.to_thread.run_sync(_stop_workers, workers)


async def enqueue_once(name: str, args: argparse.Namespace, jobs: int) -> float:
    """One producer awaiting each enqueue of ``jobs`` jobs, no worker, on a fresh server."""
    with RedisServer() as server:
        out = await _role(name, "enqueue", server.url, args, jobs)
    return float(out["enqueue_per_s"])


def _has_bulk(name: str) -> bool:
    return _is_echomq(name) or PEERS[name].bulk


async def run_adapter(
    name: str,
    args: argparse.Namespace,
    *,
    workers: int = 1,
    rep: int = 0,
    modes: tuple[str, ...] = ("enqueue", "bulk", "produce", "latency", "drain"),
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """One repetition of every mode for ``name``; answers its raw figures (flat dict)."""
    out: dict[str, Any] = {}
    errors: list[str] = []
    tag = f"w{workers}-r{rep}"

    async def attempt(mode: str, run: Callable[[], Awaitable[None]]) -> None:
        try:  # one mode failing is recorded; the other modes of the repetition still count
            await run()
        except Exception as exc:
            errors.append(f"{mode}: {exc}"[:600])
            log(f"{name} rep {rep + 1} {mode}: FAILED {exc}"[:600])

    async def enqueue() -> None:
        with RedisServer() as server:
            out.update(await _role(name, "enqueue", server.url, args, min(args.jobs, 2000)))

    async def bulk() -> None:
        with RedisServer() as server:
            out.update(await _role(name, "bulk", server.url, args, args.bulk_jobs))

    async def produce() -> None:
        with RedisServer() as server:
            procs = _start_workers(name, server.url, args, workers, tag)
            try:
                out.update(await _role(name, "produce", server.url, args, args.jobs))
                if "latency" in modes:
                    lat = await _role(name, "latency", server.url, args, args.latency_jobs)
                    samples = lat["latencies_s"]
                    out["latency_n"] = len(samples)
                    out["latency_p50_ms"] = percentile(samples, 50) * 1000
                    out["latency_p99_ms"] = percentile(samples, 99) * 1000
                    out["latencies_ms"] = [round(x * 1000, 3) for x in samples]
            finally:
                await trio.to_thread.run_sync(_stop_workers, procs)

    def keep(prefix: str, d: dict[str, Any]) -> None:
        out[f"{prefix}_per_s"] = d["drain_per_s"]
        out[f"{prefix}_prefill_s"] = d["prefill_s"]
        for key in ("worker_us_per_job", "redis_us_per_job", "mem_b_per_job"):
            if d.get(key) is not None and math.isfinite(d[key]):
                out[f"{prefix}_{key}"] = d[key]
        if "memory" in d:  # INFO memory's parts before the backlog and once all are done
            out[f"{prefix}_memory"] = d["memory"]

    async def drain(size: int) -> None:
        with RedisServer() as server:
            keep(f"drain{size}", await _drain(name, server, args, size, f"{tag}-drain{size}"))

    async def io() -> None:
        with RedisServer() as server:
            d = await _drain(
                name,
                server,
                args,
                args.io_jobs,
                f"{tag}-io",
                concurrency=args.io_concurrency,
                sleep=args.io_sleep_ms / 1000,
            )
        keep("io", d)

    if "enqueue" in modes:
        await attempt("enqueue", enqueue)
    if "bulk" in modes and _has_bulk(name):
        await attempt("bulk", bulk)
    if "produce" in modes:
        await attempt("produce", produce)
    if "drain" in modes:
        small = args.drain_jobs
        await attempt(f"drain {small}", lambda: drain(small))
        rate = out.get(f"drain{small}_per_s")
        if rate and args.big_drain and small < BIG_DRAIN:
            # the whole exercise (prefill and drain) projected from this repetition's
            projected = BIG_DRAIN / small * (out[f"drain{small}_prefill_s"] + small / rate)
            if projected < BIG_DRAIN_LIMIT_S:
                await attempt(f"drain {BIG_DRAIN}", lambda: drain(BIG_DRAIN))
            else:
                out[f"drain{BIG_DRAIN}_skipped"] = f"projected {projected:.0f} s"
    if "io" in modes and io_capable(name) and getattr(args, "io_jobs", 0) > 0:
        await attempt(f"io {args.io_jobs}", io)
    if errors:
        out["errors"] = errors
    log(
        f"{name} x{workers} rep {rep + 1}: "
        + ", ".join(f"{k}={v:,.2f}" for k, v in out.items() if isinstance(v, float))
    )
    return out


# the figures of one repetition, by the key run_adapter answers: (figure suffix, unit)
FIGURES = {
    "jobs_per_s": ("end-to-end no-op (concurrent producer)", "jobs/s"),
    "enqueue_per_s": ("enqueue, one at a time", "jobs/s"),
    "bulk_per_s": ("bulk enqueue (chunks of 1,000)", "jobs/s"),
    "latency_p50_ms": ("enqueue->result p50", "ms"),
    "latency_p99_ms": ("enqueue->result p99", "ms"),
    "drain10000_per_s": ("drain a 10,000-job backlog", "jobs/s"),
    "drain100000_per_s": ("drain a 100,000-job backlog", "jobs/s"),
    "io_per_s": ("I/O-bound drain (each job awaits a sleep)", "jobs/s"),
}
# per drain (``<drain>_<key>``): CPU and memory per job, by key: (figure suffix, unit)
PER_JOB = {
    "worker_us_per_job": ("worker CPU per job", "µs"),
    "redis_us_per_job": ("Redis CPU per job", "µs"),
    "mem_b_per_job": ("Redis memory per finished job kept", "B"),
}


def record(res: Results, label: str, figs: dict[str, Any], *, rep: int = 0) -> None:
    """Add one repetition's figures to ``res`` (and its raw sample to ``res.samples``)."""
    for key, (what, unit) in FIGURES.items():
        if key in figs and figs[key] is not None:
            res.add(f"{label}: {what}", figs[key], unit)
    for key, value in figs.items():
        drain, _, rest = key.partition("_")
        if rest in PER_JOB and isinstance(value, float):
            what, unit = PER_JOB[rest]
            res.add(f"{label}: {drain} {what}", value, unit)
    if figs.get("enqueue_turns_per_s"):
        for v in figs["enqueue_turns_per_s"]:
            res.add(f"{label}: enqueue, one at a time, each turn", v, "jobs/s")
    if "enqueue_s" in figs:  # near 1.0: the producer, not the worker, set the pace
        res.add(f"{label}: producer share of the run", figs["enqueue_s"] / figs["total_s"], "")
    res.samples.append({"system": label, "rep": rep, **figs})


async def ceilings(rep: int, res: Results, *, log: Callable[[str], None]) -> None:
    """The machine's Redis ceiling in this repetition (redis-benchmark on a fresh server)."""
    with RedisServer() as server:
        piped = await redis_benchmark(server.port, ["PING"], 1_000_000)
        single = await redis_benchmark(server.port, ["PING"], 50_000, pipeline=1, clients=1)
    res.add("ceiling: PING -P16 -c50", piped, "calls/s")
    res.add("ceiling: PING -P1 -c1 (one round trip at a time)", single, "calls/s")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    res.samples.append(
        {"system": "redis", "rep": rep, "ping_p16_c50": piped, "ping_p1_c1": single, "load": load}
    )
    log(f"ceiling rep {rep + 1}: PING -P16 {piped:,.0f}/s, -P1 -c1 {single:,.0f}/s, load {load}")
