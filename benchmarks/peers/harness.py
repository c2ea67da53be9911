"""Run one adapter (a peer, or echomq itself) end to end on a redis-server of its own.

Per adapter and repetition: start a private redis-server; measure enqueue/s with no worker
(``enqueue`` role, one job at a time); flush; start the worker process(es) the way the
adapter documents; ``produce`` (warm-up, then N jobs, time until all are done); ``latency``
(one job at a time, enqueue -> result); stop the workers (SIGTERM to their process group,
then SIGKILL) and the server. Adapters run from this folder with ``python -c`` so that the
worker CLIs import them by their module name (``peer_<name>``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from echomq.testing import RedisServer

from ..stats import Results, percentile
from . import PEERS
from .venvs import PEERS_DIR, ensure, versions

__all__ = ["run_adapter", "run_peers"]

HERE = Path(__file__).resolve().parent
LOGS = HERE.parent / "results" / "logs"


def _python(name: str) -> Path:
    return Path(sys.executable) if name == "echomq" else ensure(PEERS[name])


def _argv(name: str, role: str, url: str, args: argparse.Namespace, jobs: int) -> list[str]:
    code = f"import _common, peer_{name} as a; _common.main(a)"
    return [
        str(_python(name)),
        "-c",
        code,
        role,
        "--url",
        url,
        "--jobs",
        str(jobs),
        "--concurrency",
        str(args.concurrency),
    ]


def _env(name: str, url: str, args: argparse.Namespace) -> dict[str, str]:
    env = dict(os.environ)
    bindir = str(_python(name).parent)
    env.update(BENCH_URL=url, BENCH_CONCURRENCY=str(args.concurrency), PYTHONUNBUFFERED="1")
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    # adapters import as ``peer_<name>``; echomq's own adapter keeps the caller's PYTHONPATH
    # (a snapshot's src/ when measuring a fixed commit)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH", "")) if p)
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
    name: str, url: str, args: argparse.Namespace, count: int, tag: str
) -> list[subprocess.Popen[bytes]]:
    LOGS.mkdir(parents=True, exist_ok=True)
    procs = []
    for i in range(count):
        log = open(LOGS / f"{name}-{tag}-worker{i}.log", "wb")
        procs.append(
            subprocess.Popen(
                _argv(name, "worker", url, args, 0),
                cwd=HERE,
                env=_env(name, url, args),
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


async def run_adapter(
    name: str,
    args: argparse.Namespace,
    *,
    workers: int = 1,
    rep: int = 0,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """One repetition of the end-to-end workload for ``name``; answers its raw figures."""
    out: dict[str, Any] = {}
    with RedisServer() as server:
        if workers == 1:
            out.update(await _role(name, "enqueue", server.url, args, min(args.jobs, 2000)))
            await trio.run_process(
                ["redis-cli", "-p", str(server.port), "FLUSHALL"], capture_stdout=True
            )
        procs = _start_workers(name, server.url, args, workers, f"w{workers}-r{rep}")
        try:
            out.update(await _role(name, "produce", server.url, args, args.jobs))
            if workers == 1:
                lat = await _role(name, "latency", server.url, args, args.latency_jobs)
                out["latency_p50_ms"] = percentile(lat["latencies_s"], 50) * 1000
                out["latency_p99_ms"] = percentile(lat["latencies_s"], 99) * 1000
        finally:
            await trio.to_thread.run_sync(_stop_workers, procs)
    log(
        f"{name} x{workers} rep {rep + 1}: "
        + ", ".join(f"{k}={v:,.2f}" for k, v in out.items() if isinstance(v, float))
    )
    return out


def record(res: Results, name: str, workers: int, figs: dict[str, Any], best: float | None) -> None:
    label = name if workers == 1 else f"{name}, {workers} worker processes"
    res.add(
        f"{label}: end-to-end no-op",
        figs["jobs_per_s"],
        "jobs/s",
        ceiling=best,
        of="best peer (this run)" if best else "",
    )
    if "enqueue_s" in figs:  # near 1.0: the producer, not the worker, set the pace
        res.add(f"{label}: producer share of the run", figs["enqueue_s"] / figs["total_s"], "")
    if "enqueue_per_s" in figs:
        res.add(f"{label}: enqueue, one at a time", figs["enqueue_per_s"], "jobs/s")
    if "latency_p50_ms" in figs:
        res.add(f"{label}: enqueue->result p50", figs["latency_p50_ms"], "ms")
        res.add(f"{label}: enqueue->result p99", figs["latency_p99_ms"], "ms")


async def run_peers(args: argparse.Namespace, *, log: Callable[[str], None]) -> Results:
    import echomq

    from ..runtime import runtime_available

    # echomq runs in the same rotation, so "x best peer" is a ratio within one run
    names = args.peer or (["echomq"] if runtime_available() else []) + list(PEERS)
    res = Results()
    for name in names:
        if name == "echomq":
            res.meta["versions.echomq"] = {"echomq": echomq.__version__}
            continue
        try:
            await trio.to_thread.run_sync(ensure, PEERS[name])
            res.meta[f"versions.{name}"] = versions(PEERS[name])
        except Exception as exc:  # a peer that cannot install is recorded, not fatal
            res.notes.append(f"{name}: could not install: {exc!r}")
            names = [n for n in names if n != name]
    for rep in range(args.reps):  # peers interleaved, so each repetition shares the load
        for name in names:
            try:
                figs = await run_adapter(name, args, rep=rep, log=log)
            except Exception as exc:
                res.notes.append(f"{name} rep {rep + 1}: {exc}")
                log(f"{name}: FAILED {exc}")
                continue
            record(res, name, 1, figs, None)
    return res


__all__ += ["PEERS_DIR", "record"]
