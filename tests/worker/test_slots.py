"""Slot tasks (``_worker/slots.py``): jobs run in long-lived tasks, each job in a fresh
copy of the slot's context, and the slots end with the worker."""

from __future__ import annotations

import contextvars

import trio

import echomq

from ._runtime import serving

_seen: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="")


async def test_a_job_does_not_see_the_context_variables_of_the_slots_last_job(
    redis_url: str, queue: str
) -> None:
    q = echomq.Queue(queue, url=redis_url)
    tasks: set[int] = set()

    @q.task
    async def mark(n: int) -> str:
        before = _seen.get()
        _seen.set(f"job {n}")
        tasks.add(id(trio.lowlevel.current_task()))
        return before

    with trio.fail_after(20):
        async with q.open():
            worker = echomq.Worker(q, concurrency=1)
            async with serving(worker):
                handles = [await mark.delay(n) for n in range(5)]
                assert [await h.result(timeout=15) for h in handles] == [""] * 5
            # the worker's serve returned: its slot tasks ended with it
    assert len(tasks) == 1  # one slot task ran them all, one after another
    assert worker.statistics().completed == 5
