"""Repeatable jobs under faults: worker processes fire repeatables; every run is counted.

    python -m benchmarks repeat_soak [--workers 10] [--keys 50] [--seconds 60]
        [--phases clean,faults] [--publish]

Each phase starts a private redis-server with its append-only file on, ``--workers``
worker processes (``echomq worker benchmarks.apps.repeat_app:queue``, each running the scheduler
side: no leader), and registers ``--keys`` repeatables every second. After ``--seconds``
the workers stop and the queue is read back:

- every run is a row ``<key>~<slot>``; the registry counts the runs it enqueued (``runs``,
  bumped in the same script that writes the row) and the slots it coalesced after an outage
  (``coalesced``). A duplicate run would show as ``runs`` above the rows found, or as a
  slot's row written twice (its ``created_at`` after its first claim);
- every slot from a key's first to its last is accounted for: a row, or coalesced;
- enqueue lateness: the row's ``created_at`` minus its slot (server clock).

``faults`` kills (SIGKILL) three workers at +15 s and three more at +45 s (each replaced at
once; a run takes 0.2 s, so they die holding runs, which recovery runs again: a second
claim, not a second run), crashes and restarts Redis (its AOF kept) at +30 s, and takes it
away for 2.5 s at +36 s (``echomq.testing``'s fault kit). Slots due while Redis is away
coalesce into one run per key when it is back (``missed="once"``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import trio

import echomq
from echomq import repeat
from echomq._model.codec import JSON
from echomq._scripts.keyspace import Keyspace
from echomq.testing import (
    RedisServer,
    drop_redis,
    kill_worker,
    open_worker_process,
    restart_redis,
)

from . import files, machine, tables
from .machine import log

__all__ = ["main", "readme"]

ROOT = Path(__file__).resolve().parent.parent
EVERY_MS = 1000


async def now_ms(conn: echomq.Connection) -> int:
    return await echomq.admin.server_now_ms(conn)


class Fleet:
    """The worker processes: started, killed and replaced, stopped at the end."""

    def __init__(self, stack: AsyncExitStack, url: str, queue: str, log_dir: Path) -> None:
        self.stack, self.url, self.queue, self.log_dir = stack, url, queue, log_dir
        self.workers: list[Any] = []
        self.started = 0

    async def start(self) -> None:
        self.started += 1
        worker = await self.stack.enter_async_context(
            open_worker_process(
                "benchmarks.apps.repeat_app:queue",
                url=self.url,
                concurrency=16,
                recovery_interval=1.0,
                grace=2.0,
                cwd=ROOT,
                env={"EMQ_BENCH_QUEUE": self.queue},
                log_path=self.log_dir / f"worker-{self.started}.log",
            )
        )
        self.workers.append(worker)

    async def kill(self, n: int) -> None:
        for worker in self.workers[:n]:
            assert await kill_worker(worker) == -9
        self.workers = self.workers[n:]
        for _ in range(n):
            await self.start()


async def phase(name: str, args: argparse.Namespace, log_dir: Path) -> dict[str, Any]:
    queue = f"soak-{name}-{uuid.uuid4().hex[:6]}"
    ks = Keyspace(queue)
    faults: list[dict[str, Any]] = []
    with RedisServer(appendonly=True) as server:
        async with echomq.connect(server.url) as conn, AsyncExitStack() as stack:
            fleet = Fleet(stack, server.url, queue, log_dir)
            log(f"{name}: starting {args.workers} worker processes on {server.url}")
            for _ in range(args.workers):
                await fleet.start()
            keys = [f"r{n:02d}" for n in range(args.keys)]
            first: dict[str, int] = {}
            for key in keys:
                added = await repeat.add(
                    conn,
                    queue,
                    key,
                    task="soak.run",
                    payload=JSON.encode_call("soak.run", [key], {}),
                    schedule=repeat.Schedule.of(every=EVERY_MS / 1000),
                )
                first[key] = added.next_ms
            start = await now_ms(conn)
            log(f"{name}: {len(keys)} repeatables every {EVERY_MS} ms for {args.seconds} s")
            plan = (
                [(15, "kill", 3), (30, "redis", 0), (36, "outage", 2500), (45, "kill", 3)]
                if name == "faults"
                else []
            )
            began = trio.current_time()
            for at, what, n in plan:
                at = at * args.seconds / 60
                await trio.sleep_until(began + at)
                if what == "kill":
                    log(f"{name}: SIGKILL {n} workers (replaced at once)")
                    killed = await now_ms(conn)
                    await fleet.kill(n)
                    fault = {"at_s": round(at), "fault": f"kill -9 {n} workers", "ms": killed}
                    faults.append(fault)
                elif what == "outage":
                    log(f"{name}: redis away for {n} ms (SIGKILL, restarted from its AOF)")
                    gone = await now_ms(conn)
                    async with drop_redis(server):
                        await trio.sleep(n / 1000)
                    faults.append(
                        {
                            "at_s": round(at),
                            "fault": f"redis away {n} ms (SIGKILL, restart from the AOF)",
                            "ms": gone,
                        }
                    )
                else:
                    log(f"{name}: crash and restart redis (AOF)")
                    down = time.monotonic()
                    await restart_redis(server)
                    back = await now_ms(conn)
                    faults.append(
                        {
                            "at_s": round(at),
                            "fault": "redis SIGKILL + restart (appendonly yes)",
                            "down_ms": round((time.monotonic() - down) * 1000),
                            "ms": back,
                        }
                    )
            await trio.sleep_until(began + args.seconds)
            end = await now_ms(conn)
            for key in keys:  # no slot fires while the fleet stops
                await repeat.pause(conn, queue, key)
            log(f"{name}: stopping the workers")
        async with echomq.connect(server.url) as conn:
            return await count(conn, queue, ks, keys, first, start, end, args, faults, fleet)


async def count(
    conn: echomq.Connection,
    queue: str,
    ks: Keyspace,
    keys: list[str],
    first: dict[str, int],
    start: int,
    end: int,
    args: argparse.Namespace,
    faults: list[dict[str, Any]],
    fleet: Fleet,
) -> dict[str, Any]:
    ids: list[str] = []
    for name in ("pending", "schedule", "active", "completed", "dead"):
        ids += [i.decode() for i in await conn.execute("ZRANGE", getattr(ks, name), 0, -1)]
    rows = {job_id: await echomq.jobs.get_job(conn, queue, job_id) for job_id in ids}
    per_key: dict[str, list[int]] = {key: [] for key in keys}
    lateness: list[int] = []
    for job_id, info in rows.items():
        key, _, slot = job_id.rpartition("~")
        per_key[key].append(int(slot))
        assert info is not None and info.created_at is not None
        lateness.append(info.created_at - int(slot))
    records = {r.key: r for r in (await repeat.list_repeats(conn, queue)).records}
    expected = coalesced = runs = missing = 0
    for key in keys:
        slots = sorted(per_key[key])
        assert len(slots) == len(set(slots))
        last = slots[-1] if slots else first[key] - EVERY_MS
        span = (last - first[key]) // EVERY_MS + 1
        expected += span
        missing += span - len(slots)
        coalesced += records[key].coalesced + records[key].skipped
        runs += records[key].runs
    claims = [info.token for info in rows.values() if info is not None]
    lateness.sort()
    return {
        "workers": args.workers,
        "worker_processes_started": fleet.started,
        "repeatables": len(keys),
        "every_ms": EVERY_MS,
        "seconds": round((end - start) / 1000, 1),
        "faults": faults,
        "slots_due": expected,
        "runs_enqueued": len(ids),
        "runs_counted_by_the_registry": runs,
        "duplicate_runs": runs - len(ids),
        "slots_without_a_run": missing,
        "slots_coalesced_by_the_registry": coalesced,
        "every_slot_accounted_for": missing == coalesced,
        "enqueue_lateness_ms": {
            "p50": lateness[len(lateness) // 2],
            "p99": lateness[int(len(lateness) * 0.99)],
            "max": lateness[-1],
            "mean": round(statistics.fmean(lateness), 1),
        },
        "runs_claimed_more_than_once (killed mid-job, run again by recovery)": sum(
            1 for c in claims if c > 1
        ),
        "runs_finished": sum(1 for i in rows.values() if i is not None and i.state == "completed"),
    }


async def amain(args: argparse.Namespace, meta: dict[str, Any]) -> dict[str, Any]:
    log_dir = Path(args.logs)
    results: dict[str, Any] = {"meta": meta}
    for name in args.phases.split(","):
        results[name] = await phase(name, args, log_dir / name)
        log(f"{name}: {json.dumps(results[name])}")
    machine.finish(meta)
    return results


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks repeat_soak",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--workers", type=int, default=10, help="worker processes")
    p.add_argument("--keys", type=int, default=50, help="repeatables, every second each")
    p.add_argument("--seconds", type=float, default=60.0, help="each phase's length")
    p.add_argument("--phases", default="clean,faults")
    p.add_argument("--logs", default=str(files.LOGS / "repeat_soak"), help="workers' logs")
    files.add_arguments(p)
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    for name in args.phases.split(","):
        (Path(args.logs) / name).mkdir(parents=True, exist_ok=True)
    results = trio.run(amain, args, machine.describe("repeat_soak", argv))
    files.save("repeat_soak", results, args)
    print(readme(results, "this run"))


ROWS = (
    ("slots_due", "slots due"),
    ("runs_enqueued", "runs enqueued (rows)"),
    ("runs_counted_by_the_registry", "runs the registry counted"),
    ("duplicate_runs", "**duplicate runs**"),
    ("slots_without_a_run", "slots without a run"),
    ("slots_coalesced_by_the_registry", "slots the registry coalesced (missed=\"once\")"),
    ("every_slot_accounted_for", "every slot accounted for (a run, or coalesced)"),
    ("runs_claimed_more_than_once (killed mid-job, run again by recovery)",
     "runs claimed twice (their worker killed mid-run: a second claim, not a second run)"),
    ("runs_finished", "runs finished"),
)  # fmt: skip


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "**no**"
    return f"{v:,}" if isinstance(v, int) else str(v)


def readme(doc: dict[str, Any], source: str) -> str:
    meta = tables.meta_of(doc)
    phases: list[str] = [p for p in ("clean", "faults") if p in doc] or [
        k for k, v in doc.items() if isinstance(v, dict) and "slots_due" in v
    ]
    first = doc[phases[0]]
    setup = (
        f"{first['workers']} worker processes, {first['repeatables']} repeatables every "
        f"{first['every_ms'] / 1000:g} s, {first['seconds']:.0f} s per phase."
    )
    rows = [["faults", *(_faults(doc[p]) for p in phases)]]
    rows += [[title, *(_value(doc[p].get(key, "")) for p in phases)] for key, title in ROWS]
    late = [doc[p]["enqueue_lateness_ms"] for p in phases]
    rows.append(["enqueue lateness (row's created_at minus its slot) p50 / p99 / max",
                 *(f"{x['p50']} / {x['p99']} / {x['max']} ms" for x in late)])  # fmt: skip
    return (
        tables.conditions(meta, source=source, extra=setup)
        + "\n\n"
        + tables.markdown(["", *phases], rows)
    )


def _faults(phase: dict[str, Any]) -> str:
    found = phase.get("faults") or []
    if not found:
        return "none"
    parts = []
    for f in found:
        down = f" (down {f['down_ms']} ms)" if "down_ms" in f else ""
        parts.append(f"+{f['at_s']} s: {f['fault']}{down}")
    return "; ".join(parts)


if __name__ == "__main__":
    main()
