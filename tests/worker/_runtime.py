"""Helpers for the runtime tests: serve a worker in-process, wait for a condition,
run a worker in a subprocess (``echomq worker``, through the fault kit)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import trio

import echomq
from _waits import until as until
from echomq import jobs
from echomq.testing import WorkerProcess, open_worker_process

HERE = Path(__file__).parent


@asynccontextmanager
async def serving(worker: echomq.Worker) -> AsyncIterator[echomq.Worker]:
    """Run ``worker.serve`` for the block; stop it without grace on the way out."""
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.serve)
        try:
            yield worker
        finally:
            worker.shutdown(grace=0)


async def wait_state(
    conn: echomq.Connection, queue: str, job_id: str, state: str, within: float = 5.0
) -> echomq.JobInfo:
    """Wait until the job's row is in ``state``; answer the row."""
    found: list[echomq.JobInfo] = []

    async def check() -> bool:
        info = await jobs.get_job(conn, queue, job_id)
        if info is not None and info.state == state:
            found.append(info)
            return True
        return False

    await until(check, within)
    return found[0]


def worker_process(
    redis_url: str,
    queue: str,
    log_path: Path | None = None,
    *args: str,
    lease: float = 30.0,
    target: str = "_proc_tasks:queue",
    **options: Any,
) -> AbstractAsyncContextManager[WorkerProcess]:
    """A worker subprocess serving ``target`` from this directory (the fault kit's
    ``open_worker_process``), its queue name and lease in the environment it reads."""
    env = {"EMQ_TEST_QUEUE": queue, "EMQ_TEST_LEASE": str(lease)}
    return open_worker_process(
        target, url=redis_url, cwd=HERE, env=env, log_path=log_path, args=args, **options
    )
