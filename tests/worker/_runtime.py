"""Helpers for the runtime tests: serve a worker in-process, wait for a condition,
run a worker in a subprocess (``python -m echomq._worker.main``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import trio

import echomq
from echomq import jobs

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


async def until(check: Callable[[], bool | Awaitable[bool]], within: float = 5.0) -> None:
    """Poll (bounded) until ``check()`` answers True: for state with no event to wait on."""
    with trio.fail_after(within):
        while True:
            answer = check()
            if not isinstance(answer, bool):
                answer = await answer
            if answer:
                return
            await trio.sleep(0.01)


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


@asynccontextmanager
async def worker_process(
    redis_url: str,
    queue: str,
    log_path: Path,
    *args: str,
    lease: float = 30.0,
    target: str = "_proc_tasks:queue",
) -> AsyncIterator[trio.Process]:
    """A worker subprocess serving ``target``; killed on the way out if alive."""
    env = dict(os.environ)
    env.update(
        ECHOMQ_URL=redis_url,
        EMQ_TEST_QUEUE=queue,
        EMQ_TEST_LEASE=str(lease),
        PYTHONPATH=os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]),
    )
    command = [sys.executable, "-m", "echomq._worker.main", target, *args]
    with open(log_path, "wb") as log:  # noqa: ASYNC230 - a local file, before the child starts
        proc = await trio.lowlevel.open_process(
            command, env=env, stdout=log, stderr=subprocess.STDOUT
        )
        try:
            yield proc
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGKILL)
            with trio.CancelScope(shield=True):
                await proc.wait()
