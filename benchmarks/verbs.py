"""Claim, extend and enqueue through the verbs on one connection, beside Redis's ceiling.

Each figure sits beside redis-benchmark's ceiling for the same script, measured in the same
repetition.

    python -m benchmarks verbs [--reps 5] [--callers 1,16,64,256] [--scale 1.0] [--publish]

Per repetition, on a private redis-server (flushed between sections):
- ceilings: PING; claim count=1 on a deep pending set (every call claims a job); claim with
  the queue paused (the gate-only path: HEXISTS and return); claim count=100; extend_lock on
  one held job; extend_locks with 100 held jobs; enqueue of one job (random ids);
- echomq: the same calls through ``echomq.jobs`` with 1 / 16 / 64 / 256 concurrent callers
  sharing one auto-pipelined connection.
Ratios are taken within the repetition, and the table shows the median over repetitions.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs
import trio

import echomq
from echomq import jobs
from echomq._scripts.keyspace import Keyspace
from echomq._scripts.validate import MAX_COUNT, MAX_ENQUEUE
from echomq.jobs import lifecycle as calls
from echomq.testing import RedisServer

from . import files, machine, tables
from .ceiling import load_scripts, redis_benchmark
from .stats import Results

__all__ = ["Scale", "PAYLOAD", "main", "prefill", "readme", "run_verbs"]

LEASE_MS = 600_000
PAYLOAD = (b'{"task":"bench.noop","args":["' + b"x" * 100)[:84] + b'"],"kwargs":{}}'
PLACEHOLDER_ID = "placeholder-id"


@attrs.frozen
class Scale:
    """How many operations each figure runs (``factor`` scales them all; --quick = 0.1)."""

    factor: float = 1.0
    callers: tuple[int, ...] = (1, 16, 64, 256)

    def n(self, base: int) -> int:
        return max(1, int(base * self.factor))


async def prefill(
    conn: echomq.Connection, queue: str, count: int, *, batch: int = MAX_ENQUEUE
) -> None:
    """Enqueue ``count`` jobs with bulk enqueue, a few batches in flight at once."""
    left = count

    async def worker() -> None:
        nonlocal left
        while left > 0:
            size = min(batch, left)
            left -= size
            await jobs.enqueue_many(conn, queue, [jobs.NewJob(payload=PAYLOAD)] * size)

    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(worker)


async def drive(callers: int, total: int, op: Callable[[], Awaitable[int]]) -> tuple[float, int]:
    """Run ``total`` calls of ``op`` spread over ``callers`` tasks; answer (seconds, units)."""
    remaining, units = total, 0

    async def caller() -> None:
        nonlocal remaining, units
        while remaining > 0:
            remaining -= 1
            got = await op()  # not `units += await op()`: that reads units before awaiting
            units += got

    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(callers):
            nursery.start_soon(caller)
    return time.perf_counter() - t0, units


async def _hold(conn: echomq.Connection, queue: str, count: int) -> list[tuple[str, int]]:
    """Enqueue and claim ``count`` jobs; answer (id, token) pairs held for a long lease."""
    await prefill(conn, queue, count)
    held: list[tuple[str, int]] = []
    while len(held) < count:
        got = await jobs.claim(conn, queue, LEASE_MS, count=min(MAX_COUNT, count - len(held)))
        held += [(c.id, c.token) for c in got]
    return held


async def _fresh(conn: echomq.Connection) -> None:
    await conn.execute("FLUSHALL")
    await load_scripts(conn, "claim", "extend_lock", "extend_locks", "enqueue")


async def ceilings(conn: echomq.Connection, port: int, scale: Scale, rep: int) -> dict[str, float]:
    """redis-benchmark's calls/s for each script, in this repetition."""
    out: dict[str, float] = {}
    await _fresh(conn)
    out["ping"] = await redis_benchmark(port, ["PING"], scale.n(300_000))

    q = f"ceil-claim1-{rep}"
    n = scale.n(60_000)
    await prefill(conn, q, n + 1000)
    out["claim1"] = await redis_benchmark(port, calls.claim_call(q, LEASE_MS, 1).evalsha_args(), n)
    left = await conn.execute("ZCARD", Keyspace(q).pending)
    if left == 0:  # jobs left over: every call found one (not the empty path)
        raise RuntimeError("claim ceiling ran dry: redis-benchmark made more calls than jobs")

    await conn.execute("HSET", Keyspace(q).meta, "paused", "1")
    out["claim_paused"] = await redis_benchmark(
        port, calls.claim_call(q, LEASE_MS, 1).evalsha_args(), scale.n(300_000)
    )

    await _fresh(conn)
    q = f"ceil-claim100-{rep}"
    n = scale.n(1_500)
    await prefill(conn, q, n * 100 + 1000)
    out["claim100"] = await redis_benchmark(
        port, calls.claim_call(q, LEASE_MS, 100).evalsha_args(), n
    )

    await _fresh(conn)
    q = f"ceil-extend-{rep}"
    held = await _hold(conn, q, 100)
    job_id, token = held[0]
    out["extend1"] = await redis_benchmark(
        port, calls.extend_lock_call(q, job_id, token, LEASE_MS).evalsha_args(), scale.n(100_000)
    )
    out["extend100"] = await redis_benchmark(
        port, calls.extend_locks_call(q, held, LEASE_MS).evalsha_args(), scale.n(4_000)
    )

    await _fresh(conn)
    q = f"ceil-enqueue-{rep}"
    args = calls.enqueue_call(q, [jobs.NewJob(payload=PAYLOAD, job_id=PLACEHOLDER_ID)])
    line = [
        ("r-__rand_int__-__rand_int__" if a == PLACEHOLDER_ID else a) for a in args.evalsha_args()
    ]
    out["enqueue1"] = await redis_benchmark(
        port, line, scale.n(60_000), random_keyspace=2_000_000_000
    )
    return out


async def measure(
    conn: echomq.Connection, scale: Scale, rep: int, ceil: dict[str, float], res: Results
) -> None:
    """echomq's figures for this repetition, each with its ratio to ``ceil``."""
    for count in (1, 100):
        for c in scale.callers:
            await _fresh(conn)
            q = f"claim{count}-c{c}-{rep}"
            n = scale.n(3_000 if c == 1 else 30_000) if count == 1 else scale.n(1_000)
            n = max(n, c)
            await prefill(conn, q, n * count + count)

            async def op(q: str = q, count: int = count) -> int:
                got = await jobs.claim(conn, q, LEASE_MS, count=count)
                if len(got) != count:
                    raise RuntimeError("pending ran dry during the claim benchmark")
                return len(got)

            seconds, claimed = await drive(c, n, op)
            if count == 1:
                res.add(
                    f"claim count=1, {c} callers",
                    claimed / seconds,
                    "claims/s",
                    ceiling=ceil["claim1"],
                    of="claim.lua EVALSHA -P16 (deep pending)",
                )
            else:
                res.add(
                    f"claim count=100, {c} callers",
                    claimed / seconds,
                    "jobs/s",
                    ceiling=ceil["claim1"],
                    of="claim.lua count=1 calls/s",
                )
                res.add(
                    f"claim count=100, {c} callers (calls)",
                    n / seconds,
                    "calls/s",
                    ceiling=ceil["claim100"],
                    of="claim.lua count=100 EVALSHA -P16",
                )

    await _fresh(conn)
    q = f"extend-{rep}"
    held = await _hold(conn, q, max(scale.callers) * 2)
    for c in scale.callers:
        n = max(c, scale.n(3_000 if c == 1 else 30_000))
        it = iter(range(10**9))

        async def one(q: str = q, it: object = it) -> int:
            job_id, token = held[next(it) % len(held)]  # type: ignore[call-overload]
            await jobs.extend_lock(conn, q, job_id, token, LEASE_MS)
            return 1

        seconds, leases = await drive(c, n, one)
        res.add(
            f"extend_lock, {c} callers",
            leases / seconds,
            "leases/s",
            ceiling=ceil["extend1"],
            of="extend_lock.lua EVALSHA -P16",
        )

    batch = held[:100]
    for c in scale.callers:
        n = max(c, scale.n(300 if c == 1 else 2_000))

        async def many(q: str = q) -> int:
            out = await jobs.extend_locks(conn, q, batch, LEASE_MS)
            return len(out)

        seconds, leases = await drive(c, n, many)
        res.add(
            f"extend_locks x100, {c} callers",
            leases / seconds,
            "leases/s",
            ceiling=ceil["extend100"] * 100,
            of="extend_locks.lua x100 EVALSHA -P16",
        )

    for c in (1, 64):
        await _fresh(conn)
        q = f"enqueue-c{c}-{rep}"
        n = max(c, scale.n(3_000 if c == 1 else 30_000))

        async def enq(q: str = q) -> int:
            await jobs.enqueue(conn, q, PAYLOAD)
            return 1

        seconds, done = await drive(c, n, enq)
        res.add(
            f"enqueue, {c} callers",
            done / seconds,
            "jobs/s",
            ceiling=ceil["enqueue1"],
            of="enqueue.lua x1 EVALSHA -P16",
        )

    for size in (100, MAX_ENQUEUE):  # 100, and the cap of one call (issue 9)
        await _fresh(conn)
        q = f"enqueue-bulk{size}-{rep}"
        n = max(1, scale.n(100_000) // size)
        batch_jobs: Sequence[jobs.NewJob] = [jobs.NewJob(payload=PAYLOAD)] * size

        async def bulk(q: str = q, batch: Sequence[jobs.NewJob] = batch_jobs) -> int:
            await jobs.enqueue_many(conn, q, batch)
            return len(batch)

        seconds, done = await drive(1, n, bulk)
        res.add(
            f"enqueue_many x{size}, 1 caller",
            done / seconds,
            "jobs/s",
            ceiling=ceil["enqueue1"],
            of="enqueue.lua x1 EVALSHA -P16",
        )


# (label, ceiling key, items per call, unit, compared with, its label)
CEILING_ROWS = (
    ("ceiling: claim.lua count=1 (deep pending)", "claim1", 1, "calls/s", "ping", "PING -P16"),
    ("ceiling: claim.lua paused (gate only)", "claim_paused", 1, "calls/s", "ping", "PING -P16"),
    ("ceiling: claim.lua count=100", "claim100", 100, "jobs/s", "claim1",
     "claim.lua count=1 calls/s"),
    ("ceiling: extend_lock.lua", "extend1", 1, "leases/s", "ping", "PING -P16"),
    ("ceiling: extend_locks.lua x100", "extend100", 100, "leases/s", "extend1",
     "extend_lock.lua calls/s"),
    ("ceiling: enqueue.lua x1", "enqueue1", 1, "calls/s", "ping", "PING -P16"),
)  # fmt: skip


async def run_verbs(
    url: str, port: int, scale: Scale, reps: int, *, log: Callable[[str], None]
) -> Results:
    res = Results()
    async with echomq.connect(url) as conn:
        for rep in range(reps):
            ceil = await ceilings(conn, port, scale, rep)
            res.add("ceiling: PING", ceil["ping"], "calls/s")
            for label, key, per_call, unit, against, of in CEILING_ROWS:
                res.add(label, ceil[key] * per_call, unit, ceiling=ceil[against], of=of)
            await measure(conn, scale, rep, ceil, res)
            log(f"verbs: repetition {rep + 1}/{reps} done")
        await conn.execute("FLUSHALL")
    return res


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks verbs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--callers", default="1,16,64,256", help="concurrent callers, comma-separated")
    p.add_argument("--scale", type=float, default=1.0, help="multiply every operation count")
    files.add_arguments(p, reps=5)
    return p


async def _run(args: argparse.Namespace) -> Results:
    scale = Scale(args.scale, tuple(int(c) for c in args.callers.split(",")))
    with RedisServer() as server:
        machine.log(f"verbs: redis-server on port {server.port}")
        return await run_verbs(server.url, server.port, scale, args.reps, log=machine.log)


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    meta = machine.describe("verbs", argv)
    res = trio.run(_run, args)
    res.meta = machine.finish(meta)
    print(res.table("claim / extend / enqueue through the verbs (one connection)"), flush=True)
    files.save("verbs", res.to_json(), args)


def readme(doc: dict[str, Any], source: str) -> str:
    head = ("figure", "median", "unit", "range", "x ceiling", "ceiling", "n")
    rows = []
    for name, f in doc["figures"].items():
        v = f["values"]
        rows.append(
            (
                name,
                tables.num(f["median"]),
                f["unit"],
                tables.span(v),
                "" if f.get("ratio_median") is None else f"{f['ratio_median']:.2f}",
                f.get("ceiling", ""),
                str(len(v)),
            )
        )
    reps = len(doc["figures"].get("ceiling: PING", {}).get("values", [])) or None
    return (
        tables.conditions(doc["meta"], reps=reps, source=source)
        + "\n\n"
        + tables.markdown(head, rows)
    )


if __name__ == "__main__":
    main()
