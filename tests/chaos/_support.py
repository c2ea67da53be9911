"""Helpers for the chaos tests: the app's environment, polling a queue's counters."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

import echomq
from echomq import admin

HERE = Path(__file__).parent
APP = "_chaos_app:queue"


def app_env(queue: str, lease: float = 0.3) -> dict[str, str | None]:
    """The environment ``_chaos_app`` reads (its queue name and task lease)."""
    return {"EMQ_TEST_QUEUE": queue, "EMQ_TEST_LEASE": str(lease)}


async def until(check: Callable[[], Awaitable[bool]]) -> None:
    """Poll observable state until ``check()`` holds; bound it with trio.fail_after."""
    while True:
        if await check():
            return
        await trio.sleep(0.01)


async def commits(conn: echomq.Connection, queue: str) -> int:
    """Completions the server recorded (each complete script that moved a job)."""
    return (await admin.stats(conn, queue)).completed_total


async def release(conn: echomq.Connection, queue: str, job_id: str) -> None:
    """Let ``_chaos_app.hold`` return (it polls its row's progress)."""
    await echomq.jobs.update_progress(conn, queue, job_id, "release")
