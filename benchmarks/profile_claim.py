"""A steady load for py-spy: one verb at C callers on one connection, for a fixed time.

    sudo-less: .venv/bin/py-spy record --format raw -o claim.txt -- \
        .venv/bin/python -m benchmarks.profile_claim --verb claim --callers 64 --seconds 10
"""

from __future__ import annotations

import argparse
import time

import trio

import echomq
from echomq import jobs
from echomq.testing import RedisServer

from .verbs import LEASE_MS, PAYLOAD, prefill


async def main(verb: str, callers: int, seconds: float) -> None:
    with RedisServer() as server:
        async with echomq.connect(server.url) as conn:
            q = "profile"
            await prefill(conn, q, 400_000 if verb == "claim" else 1_000)
            held = [(c.id, c.token) for c in await jobs.claim(conn, q, LEASE_MS, count=200)]
            done = 0
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

            t0 = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for i in range(callers):
                    nursery.start_soon(caller, i)
            print(f"{verb}: {done / (time.perf_counter() - t0):,.0f}/s at {callers} callers")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--verb", default="claim", choices=["claim", "extend", "enqueue", "ping"])
    p.add_argument("--callers", type=int, default=64)
    p.add_argument("--seconds", type=float, default=10.0)
    a = p.parse_args()
    trio.run(main, a.verb, a.callers, a.seconds)
