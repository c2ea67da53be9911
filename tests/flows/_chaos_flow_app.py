"""Tasks for the flow kill -9 test's worker processes
(``open_worker_process("_chaos_flow_app:queue")``, run from tests/flows).

The queue name comes from ``EMQ_TEST_QUEUE``; each task counts its executions in
``emq-test:{<queue>}:runs`` (tag -> runs) before it sleeps, so a run killed mid-job shows.
The test registers same-named twins on its own ``Queue`` (:func:`register`).
"""

from __future__ import annotations

import os
from typing import Any

import trio

import echomq

LEASE = 0.3


def runs_key(name: str) -> str:
    return f"emq-test:{{{name}}}:runs"


def register(q: echomq.Queue) -> dict[str, Any]:
    async def count(tag: str) -> None:
        await q.connection.execute("HINCRBY", runs_key(q.name), tag, 1)

    @q.task(name="leaf", lease=LEASE)
    async def leaf(n: int, seconds: float = 0.0) -> int:
        await count(f"leaf:{n}")
        await trio.sleep(seconds)
        return n

    @q.task(name="total", lease=LEASE)
    async def total(values: list[int], tag: str, seconds: float = 0.0) -> int:
        await count(tag)
        await trio.sleep(seconds)
        return sum(values)

    @q.task(name="fanout", lease=LEASE)
    async def fanout(job: echomq.Job, n: int, seconds: float = 0.0) -> int:
        await count("fanout")
        await job.spawn([leaf.s(i, 0.2) for i in range(n)])
        if job.attempt == 1:
            await trio.sleep(seconds)  # (killed here: between the spawn and the wait)
        return sum(await job.wait_children())

    return {"leaf": leaf, "total": total, "fanout": fanout}


queue = echomq.Queue(os.environ.get("EMQ_TEST_QUEUE", "chaos-flow"))
tasks = register(queue)
