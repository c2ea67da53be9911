"""A steady load for a profiler: one verb at C callers on one connection, for a fixed time.

A diagnostic, not a published figure. It prints ``steady <pid>`` once the queue is filled,
so a profiler attaches to the steady phase only (not the prefill)::

    .venv/bin/python -m benchmarks profile_claim --verb claim --callers 64 --seconds 12 &
    # after "steady <pid>":
    .venv/bin/py-spy record --pid <pid> --duration 8 --format raw -o claim.txt
"""

from __future__ import annotations

import argparse
import os
import time

import trio

import echomq
from echomq import jobs
from echomq.testing import RedisServer

from .verbs import LEASE_MS, PAYLOAD, prefill


async def run(verb: str, callers: int, seconds: float) -> None:
    with RedisServer() as server:
        async with echomq.connect(server.url) as conn:
            q = "profile"
            await prefill(conn, q, 300_000 if verb == "claim" else 1_000)
            held = [(c.id, c.token) for c in await jobs.claim(conn, q, LEASE_MS, count=200)]
            done = 0
            print(f"steady {os.getpid()}", flush=True)
            deadline = time.perf_counter() + seconds

            async def caller(i: int) -> None:
                nonlocal done
                while time.perf_counter() < deadline:
                    if verb == "claim":
                        await jobs.claim(conn, q, LEASE_MS, count=1)
                    elif verb == "extend":
                        job_id, token = held[i % len(held)]
                        await jobs.extend_lock(conn, q, job_id, token, LEASE_MS)
                    elif verb == "enqueue":
                        await jobs.enqueue(conn, q, PAYLOAD)
                    else:
                        await conn.execute("PING")
                    done += 1

            before = await stats(conn)
            t0 = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for i in range(callers):
                    nursery.start_soon(caller, i)
            seconds = time.perf_counter() - t0
            after = await stats(conn)
            d = {k: after[k] - before[k] for k in after}
            print(
                f"{verb}: {done / seconds:,.0f}/s at {callers} callers; server side: "
                f"{d['total_commands_processed'] / max(1, d['total_reads_processed']):.1f} "
                f"commands per read, {d['total_reads_processed'] / seconds:,.0f} reads/s, "
                f"server CPU {(d['used_cpu_sys'] + d['used_cpu_user']) / seconds:.0%}"
            )


async def stats(conn: echomq.Connection) -> dict[str, float]:
    """Counters from INFO (stats, cpu): the server's view of how deep the pipeline was."""
    text = (await conn.execute("INFO", "all")).decode()
    keep = ("total_commands_processed", "total_reads_processed", "used_cpu_sys", "used_cpu_user")
    out: dict[str, float] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in keep:
            out[key] = float(value)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks profile_claim",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--verb", default="claim", choices=["claim", "extend", "enqueue", "ping"])
    p.add_argument("--callers", type=int, default=64)
    p.add_argument("--seconds", type=float, default=10.0)
    a = p.parse_args(argv)
    trio.run(run, a.verb, a.callers, a.seconds)


if __name__ == "__main__":
    main()
