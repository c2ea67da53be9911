"""Repeat soak (issue 13): worker processes fire repeatables; every run counted.

``python -m benchmarks.repeat_soak [--workers 10] [--keys 50] [--seconds 60]
[--phases clean,faults] [--json benchmarks/results/published/repeat-soak-20261201.json]``

Each phase starts a private redis-server with its append-only file on, ``--workers``
worker processes (``echomq worker benchmarks.repeat_app:queue``, each running the scheduler
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
coalesce into one run per key when it is back (``missed="once"``). Results print as JSON
and are saved to ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import trio

import echomq
from benchmarks.__main__ import _commit, _src_commit
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

ROOT = Path(__file__).resolve().parent.parent
EVERY_MS = 1000


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


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
                "benchmarks.repeat_app:queue",
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


async def amain(args: argparse.Namespace) -> dict[str, Any]:
    log_dir = Path(args.logs)
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "cpus": os.cpu_count(),
        "argv": " ".join(sys.argv[1:]),
        "echomq_commit": _commit(Path(echomq.__file__).parent),
        "echomq_src_commit": _src_commit(Path(echomq.__file__).parent),
    }
    for name in args.phases.split(","):
        results[name] = await phase(name, args, log_dir / name)
        log(f"{name}: {json.dumps(results[name])}")
    return results


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.repeat_soak", description=__doc__)
    p.add_argument("--workers", type=int, default=10)
    p.add_argument("--keys", type=int, default=50)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--phases", default="clean,faults")
    p.add_argument("--logs", default=str(ROOT / "benchmarks" / "results" / "repeat-soak"))
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    for name in args.phases.split(","):
        (Path(args.logs) / name).mkdir(parents=True, exist_ok=True)
    results = trio.run(amain, args)
    text = json.dumps(results, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
