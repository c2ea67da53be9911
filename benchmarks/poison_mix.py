"""The poison mix: canary jobs beside one poison job of each trio misuse, on worker processes.

    python -m benchmarks poison_mix [--workers 3] [--canaries 1000] [--attempts 2]
        [--concurrency 8] [--json PATH]

On a private redis-server, ``--workers`` worker processes (``echomq worker
benchmarks.apps.poison_app:queue``) serve one queue; then ``--canaries`` innocent jobs are
enqueued with one job of each poison task of ``benchmarks/apps/poison_app.py`` spread
among them (every job may run ``--attempts`` times). The run waits for every job's outcome
and then stops each worker with SIGTERM. It reports:

- worker deaths: a worker that exited before its SIGTERM, with its exit code; and the
  exit code of each SIGTERM stop (0 is a clean stop);
- canaries completed with the right value, and stalls charged to any job (``stalled`` on
  its row: an innocent job charged for a neighbour's mistake);
- each poison job's final state, attempts and reason (its last error's first line);
- after ``--linger`` seconds more of serving (a scope left open fails late), ``--after``
  more canaries, which must complete too;
- lines in the workers' output that mean a slot or the worker broke ("Cancel scope stack
  corrupted", a hand-back before the SIGTERM).

What the isolation promises (docs/runtime.md): no deaths, every canary completed, every
poison job dead with a reason naming what its code did, no stall charged. Results go to
benchmarks/results/scratch/ (this run is a check, not a figure: nothing is published).
"""

from __future__ import annotations

import argparse
import uuid
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import trio

import echomq
from echomq import jobs
from echomq._model.codec import JSON
from echomq.errors import JobFailed
from echomq.testing import RedisServer, WorkerProcess, open_worker_process

from . import files, machine
from .apps.poison_app import POISON
from .machine import log

__all__ = ["main", "parser", "run_mix"]

ROOT = Path(__file__).resolve().parent.parent
TARGET = "benchmarks.apps.poison_app:queue"
BROKEN = ("Cancel scope stack corrupted", "no shutdown was asked for", "worker failed")


async def _send(conn: echomq.Connection, queue: str, attempts: int, task: str, *args: Any) -> str:
    return await jobs.enqueue(conn, queue, JSON.encode_call(task, args, {}), max_attempts=attempts)


def _first_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[-1][:200] if lines else ""


async def run_mix(
    url: str,
    *,
    workers: int,
    canaries: int,
    attempts: int,
    concurrency: int,
    wait: float,
    linger: float = 3.0,
    after: int = 100,
) -> dict[str, Any]:
    """One mix on the Redis at ``url``; answer the report (see the module's text)."""
    name = f"poison-mix-{uuid.uuid4().hex[:8]}"
    q = echomq.Queue(name, url=url)
    env = {"EMQ_BENCH_QUEUE": name, "PYTHONPATH": str(ROOT)}
    poison_ids: dict[str, str] = {}
    canary_ids: dict[str, int] = {}
    completed = wrong = 0
    outcomes: dict[str, dict[str, Any]] = {}
    procs: list[WorkerProcess] = []
    early: list[int | None] = []
    async with q.open(), AsyncExitStack() as stack:
        conn = q.connection
        for _ in range(workers):
            procs.append(
                await stack.enter_async_context(
                    open_worker_process(
                        TARGET, url=url, cwd=ROOT, env=env, concurrency=concurrency, grace=5
                    )
                )
            )
        log(f"{workers} workers serving {name}; enqueueing {canaries} canaries")
        names = list(POISON)
        every = max(1, canaries // (len(names) + 1))
        for n in range(canaries):
            if n and n % every == 0 and len(poison_ids) < len(names):
                task = names[len(poison_ids)]
                poison_ids[task] = await _send(conn, name, attempts, task)
            canary_ids[await _send(conn, name, attempts, "canary", n)] = n + 1
        for task in names[len(poison_ids) :]:  # (fewer canaries than poison tasks)
            poison_ids[task] = await _send(conn, name, attempts, task)
        with trio.move_on_after(wait):
            for job_id, expected in canary_ids.items():
                try:
                    value = await q.handle(job_id).result()
                except JobFailed:
                    wrong += 1
                    continue
                if value == expected:
                    completed += 1
                else:
                    wrong += 1
            for task, job_id in poison_ids.items():
                try:
                    await q.handle(job_id).result()
                    outcomes[task] = {"state": "completed"}
                except JobFailed as exc:
                    outcomes[task] = {"state": "dead", "reason": _first_line(exc.error)}
        # a scope a poison job left open fails late (its deadline, or the next job's):
        # the workers go on serving a while, then a second wave of canaries must complete
        await trio.sleep(linger)
        late = {await _send(conn, name, attempts, "canary", n): n + 1 for n in range(after)}
        late_completed = 0
        with trio.move_on_after(wait):
            for job_id, expected in late.items():
                try:
                    late_completed += await q.handle(job_id).result() == expected
                except JobFailed:
                    pass
        infos = {
            job_id: await q.handle(job_id).info()
            for job_id in [*canary_ids, *late, *poison_ids.values()]
        }
        for task, job_id in poison_ids.items():
            info = infos[job_id]
            row = outcomes.setdefault(task, {})
            row["state"] = info.state if info is not None else "gone"
            if info is not None:
                row.update(attempts=info.attempts, failures=info.failures, stalled=info.stalled)
                row.setdefault("reason", _first_line(info.last_error))
        early = [proc.returncode for proc in procs]
        stops = [await proc.stop() for proc in procs]
    stalled = sum(info.stalled for info in infos.values() if info is not None)
    outputs = [proc.output.split("SIGTERM")[0] for proc in procs]
    return {
        "workers": workers,
        "canaries": canaries,
        "attempts": attempts,
        "concurrency": concurrency,
        "worker_deaths": [code for code in early if code is not None],
        "exit_codes_before_sigterm": early,
        "sigterm_exit_codes": stops,
        "canaries_completed": completed,
        "canaries_wrong_or_failed": wrong,
        "linger_s": linger,
        "late_canaries": after,
        "late_canaries_completed": late_completed,
        "stalls_charged": stalled,
        "poison": outcomes,
        "broken_lines": {text: sum(out.count(text) for out in outputs) for text in BROKEN},
        "handed_back_before_sigterm": sum(out.count("handed") for out in outputs),
    }


def report(result: dict[str, Any]) -> str:
    lines = [
        f"workers {result['workers']}, canaries {result['canaries']}, "
        f"attempts {result['attempts']}, concurrency {result['concurrency']}",
        f"worker deaths before SIGTERM: {len(result['worker_deaths'])} "
        f"(exit codes {result['exit_codes_before_sigterm']})",
        f"SIGTERM exit codes: {result['sigterm_exit_codes']}",
        f"canaries completed: {result['canaries_completed']} of {result['canaries']} "
        f"({result['canaries_wrong_or_failed']} wrong or failed)",
        f"after {result['linger_s']:g} s more: {result['late_canaries_completed']} of "
        f"{result['late_canaries']} late canaries completed",
        f"stalls charged to any job: {result['stalls_charged']}",
        f"broken lines in worker output: {result['broken_lines']}, "
        f"hand-backs before SIGTERM: {result['handed_back_before_sigterm']}",
        "poison jobs:",
    ]
    for task, row in result["poison"].items():
        lines.append(
            f"  {task:22} {row.get('state')}, attempts {row.get('attempts')}, "
            f"stalled {row.get('stalled')}: {row.get('reason', '')}"
        )
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks poison_mix",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--canaries", type=int, default=1000)
    p.add_argument("--attempts", type=int, default=2, help="max_attempts of every job")
    p.add_argument("--concurrency", type=int, default=8, help="each worker's")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for outcomes")
    p.add_argument("--linger", type=float, default=3.0, help="seconds served after the mix")
    p.add_argument("--after", type=int, default=100, help="canaries enqueued after --linger")
    p.add_argument("--json", type=Path, help="save the results here (default: scratch)")
    return p


async def amain(args: argparse.Namespace, argv: list[str] | None) -> dict[str, Any]:
    meta = machine.describe("poison_mix", argv)
    with RedisServer() as server:
        result = await run_mix(
            server.url,
            workers=args.workers,
            canaries=args.canaries,
            attempts=args.attempts,
            concurrency=args.concurrency,
            wait=args.timeout,
            linger=args.linger,
            after=args.after,
        )
    machine.finish(meta)
    return {"meta": meta, "result": result}


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    results = trio.run(amain, args, argv)
    files.save("poison_mix", results, args)
    print(report(results["result"]))


if __name__ == "__main__":
    main()
