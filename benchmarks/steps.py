"""Durable steps: what a step costs, and that steps hold through kill -9s.

    python -m benchmarks steps [--parts cost,chaos] [--jobs 20000] [--steps 10] [--reps 3]
        [--chaos-jobs 500] [--chaos-kills 20] [--publish]

``cost``: one worker process (``echomq worker benchmarks.apps.steps_app:queue``,
concurrency 64) drains a backlog of ``--jobs`` jobs on a fresh private redis-server, once
with jobs of ``--steps`` no-op steps and once with jobs of none, in turns in every
repetition. CPU seconds (utime + stime, /proc) of the worker and of redis-server from the
resume of the paused queue to its last completion; the cost of a step is the difference
divided by jobs x steps, in µs.

``chaos``: ``--chaos-jobs`` jobs of ``--steps`` steps (each step sleeps 50 ms, then logs
``effect <step> <token>`` to its job's log list) worked by 3 worker processes of concurrency
4, one of them SIGKILLed every ``--chaos-kill-every`` seconds and replaced until ``--chaos-
kills`` kills were made, then the rest drained. Counted per step: its committed record (the
token of the run that wrote it) and every effect logged. A step ran again after its commit
when an effect carries a greater token than its record's: that must never happen. An effect
with a smaller token is a run a kill cut short before its commit (allowed: a step is at-
least-once, docs/steps.md).
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import statistics
from pathlib import Path
from typing import Any

import trio

import echomq
from echomq import admin, jobs
from echomq.jobs import steps as step_verbs
from echomq.testing import RedisServer, kill_worker, open_worker_process

from . import files, machine, tables
from .apps.steps_app import register
from .files import LOGS
from .stats import Results

__all__ = ["main", "readme"]

ROOT = Path(__file__).resolve().parent.parent
APP = "benchmarks.apps.steps_app:queue"


def _env(queue: str, lease: float) -> dict[str, str | None]:
    return {"EMQ_BENCH_QUEUE": queue, "EMQ_BENCH_LEASE": str(lease), "PYTHONUNBUFFERED": "1"}


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _completed(conn: echomq.Connection, queue: str) -> int:
    return (await admin.stats(conn, queue)).completed_total


async def cost_once(server: RedisServer, steps: int, n: int, tag: str) -> dict[str, float]:
    name = f"cost-{tag}"
    q = echomq.Queue(name, url=server.url)
    task = register(q)
    async with q.open():
        conn = q.connection
        await task.delay(0, 0.0, False)  # makes the queue
        await admin.pause(conn, name)
        for start in range(0, n, 1000):
            await task.starmap([(steps, 0.0, False)] * min(1000, n - start))
        async with open_worker_process(
            APP, url=server.url, concurrency=64, cwd=ROOT, env=_env(name, 30),
            log_path=LOGS / f"steps-cost-{tag}.log",
        ) as worker:  # fmt: skip
            w0, r0 = _cpu(worker.pid), _cpu(server.process.pid)
            t0 = trio.current_time()
            await admin.resume(conn, name)
            while await _completed(conn, name) < n + 1:  # noqa: ASYNC110 (a count in Redis)
                await trio.sleep(0.02)
            took = trio.current_time() - t0
            w1, r1 = _cpu(worker.pid), _cpu(server.process.pid)
    return {"worker_s": w1 - w0, "redis_s": r1 - r0, "seconds": took}


async def part_cost(args: argparse.Namespace, res: Results, log: Any) -> None:
    runs = []
    for rep in range(args.reps):
        order = (0, args.steps) if rep % 2 == 0 else (args.steps, 0)
        got = {}
        for k in order:
            with RedisServer() as server:
                got[k] = await cost_once(server, k, args.jobs, f"{rep}-{k}")
            log(f"cost rep {rep + 1} steps={k}: {got[k]}")
        per = args.jobs * args.steps
        run = {
            "rep": rep,
            "worker_us_per_step": (got[args.steps]["worker_s"] - got[0]["worker_s"]) / per * 1e6,
            "redis_us_per_step": (got[args.steps]["redis_s"] - got[0]["redis_s"]) / per * 1e6,
            "worker_us_per_job_no_step": got[0]["worker_s"] / args.jobs * 1e6,
            "redis_us_per_job_no_step": got[0]["redis_s"] / args.jobs * 1e6,
        }
        runs.append(run)
        for key in ("worker_us_per_step", "redis_us_per_step"):
            res.add(f"cost: {key}", run[key], "µs")
    res.meta["cost_runs"] = runs


async def part_chaos(args: argparse.Namespace, res: Results, log: Any) -> None:
    name = "chaos"
    lease = 1.0
    rng = random.Random(29)
    with RedisServer() as server:
        q = echomq.Queue(name, url=server.url)
        task = register(q, lease)
        kills = 0
        async with q.open():
            conn = q.connection
            handles = await task.starmap([(args.steps, 0.05, True)] * args.chaos_jobs)
            stops = [trio.Event() for _ in range(3)]
            finished = trio.Event()

            async def slot(i: int) -> None:
                nonlocal kills
                life = 0
                while not finished.is_set():
                    life += 1
                    async with open_worker_process(
                        APP, url=server.url, concurrency=4, recovery_interval=0.1,
                        max_stalled=1000, cwd=ROOT, env=_env(name, lease),
                        log_path=LOGS / f"steps-chaos-{i}-{life}.log",
                    ) as worker:  # fmt: skip
                        await stops[i].wait()
                        stops[i] = trio.Event()
                        if finished.is_set():
                            return
                        await kill_worker(worker)
                        kills += 1

            t0 = trio.current_time()
            async with trio.open_nursery() as nursery:
                for i in range(3):
                    nursery.start_soon(slot, i)

                async def killer() -> None:
                    while kills < args.chaos_kills:
                        await trio.sleep(args.chaos_kill_every)
                        stops[rng.randrange(3)].set()

                nursery.start_soon(killer)
                results = [await h.result(timeout=1800) for h in handles]
                took = trio.current_time() - t0
                finished.set()
                nursery.cancel_scope.cancel()
            figs = {"kills": kills, "seconds": took, "jobs": len(handles), "steps": args.steps}
            lost = rerun_after_commit = cut_short = committed = missing = 0
            for h in handles:
                records = await step_verbs.read_steps(conn, name, h.id)
                committed += len(records)
                effects: dict[int, list[int]] = {}
                for line in await jobs.get_job_logs(conn, name, h.id):
                    if line.startswith("effect "):
                        _, step, token = line.split()
                        effects.setdefault(int(step), []).append(int(token))
                for i in range(args.steps):
                    record = records.get(f"s{i}")
                    if record is None:
                        missing += 1
                        continue
                    runs = effects.get(i, [])
                    if not runs:
                        lost += 1
                    rerun_after_commit += sum(1 for t in runs if t > record.token)
                    cut_short += sum(1 for t in runs if t < record.token)
    figs.update(
        completed=sum(1 for r in results if r == args.steps),
        steps_committed=committed,
        steps_missing=missing,
        steps_without_effect=lost,
        reruns_after_commit=rerun_after_commit,
        runs_cut_short_before_commit=cut_short,
    )
    log(f"chaos: {figs}")
    res.meta["chaos"] = figs
    res.add("chaos: SIGKILLs", kills, "kills")
    res.add("chaos: re-runs after a commit", rerun_after_commit, "runs")


async def run_steps(args: argparse.Namespace, *, log: Any) -> Results:
    res = Results()
    parts = args.parts.split(",")
    res.meta["steps"] = {"parts": parts, "jobs": args.jobs, "steps": args.steps}
    LOGS.mkdir(parents=True, exist_ok=True)
    if "cost" in parts:
        await part_cost(args, res, log)
    if "chaos" in parts:
        await part_chaos(args, res, log)
    return res


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks steps",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--parts", default="cost,chaos", help="which parts")
    p.add_argument("--jobs", type=int, default=20_000, help="cost: jobs per drain")
    p.add_argument("--steps", type=int, default=10, help="steps per job")
    p.add_argument("--chaos-jobs", type=int, default=500, help="chaos: jobs")
    p.add_argument("--chaos-kills", type=int, default=20, help="chaos: SIGKILLs to make")
    p.add_argument("--chaos-kill-every", type=float, default=0.5, help="chaos: seconds between")
    files.add_arguments(p, reps=3)
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    meta = machine.describe("steps", argv)
    res = trio.run(functools.partial(run_steps, args, log=machine.log))
    res.meta = machine.finish({**meta, **res.meta})
    print(res.table("steps"), flush=True)
    files.save("steps", res.to_json(), args)


def readme(doc: dict[str, Any], source: str) -> str:
    meta = doc["meta"]
    lines = [tables.conditions(meta, reps=len(meta.get("cost_runs") or []) or None, source=source)]
    runs = meta.get("cost_runs") or []
    if runs:
        s = meta["steps"]
        lines += [
            "",
            f"**A step's cost**: one worker process drains {s['jobs']:,} jobs of {s['steps']} "
            "no-op steps and as many of none, in turns on fresh servers; the difference in CPU "
            "per step:",
            "",
            "| | " + " | ".join(f"rep {r['rep'] + 1}" for r in runs) + " | median |",
            "|---|" + "---:|" * (len(runs) + 1),
        ]
        for key, label in (
            ("worker_us_per_step", "worker µs per step"),
            ("redis_us_per_step", "Redis µs per step"),
            ("worker_us_per_job_no_step", "worker µs per job, no step"),
            ("redis_us_per_job_no_step", "Redis µs per job, no step"),
        ):
            values = [r[key] for r in runs]
            cells = " | ".join(f"{v:.1f}" for v in values)
            lines.append(f"| {label} | {cells} | **{statistics.median(values):.1f}** |")
    chaos = meta.get("chaos")
    if chaos:
        lines += [
            "",
            f"**kill -9 between steps**: {chaos['jobs']} jobs of {chaos['steps']} steps, 3 "
            f"worker processes, {chaos['kills']} SIGKILLs ({chaos['seconds']:.1f} s):",
            "",
            "| jobs completed | steps committed | steps missing | re-runs after a commit | "
            "runs cut short before their commit |",
            "|---:|---:|---:|---:|---:|",
            f"| {chaos['completed']} | {chaos['steps_committed']:,} | {chaos['steps_missing']} | "
            f"{chaos['reruns_after_commit']} | {chaos['runs_cut_short_before_commit']} |",
        ]
    return "\n".join(lines)
