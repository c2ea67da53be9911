"""Jobs that misuse trio, and innocent ones, for the isolation tests (docs/runtime.md,
"A job's trio mistakes stay the job's").

Each poison task does, once, one of the things that used to reach the worker: a
``trio.Cancelled`` that nothing cancelled (saved and re-raised, made by hand, raised in a
thread), a cancel of the slot task's parent nursery, a cancel scope left open (entered by
hand, or held by an async generator suspended at its yield), a ``BaseException`` subclass
of the job's own. ``queue`` serves them in a worker subprocess (``echomq worker
_isolation_tasks:queue``; the queue name from the environment); the in-process tests
register the same functions on a queue of their own.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import trio

import echomq

LEAK = 0.05  # seconds: the deadline of a scope a poison job leaves open

# task name -> a fragment of the reason its job must fail with
REASONS = {
    "reraise-saved": "RuntimeError: the task raised trio.Cancelled that no cancellation",
    "cancelled-by-hand": "RuntimeError: the task raised trio.Cancelled that no cancellation",
    "thread-cancelled": "RuntimeError: the task raised trio.Cancelled that no cancellation",
    "cancel-parent-nursery": "RuntimeError: the task cancelled its slot task's nursery",
    "enter-by-hand": "RuntimeError: the task left a cancel scope open",
    "generator-scope": "RuntimeError: the task left a cancel scope open",
    "base-exception": "Escape: not an Exception",
}


async def reraise_saved() -> None:
    """Save the Cancelled a scope of its own caught, raise it again once that scope closed."""
    saved: list[trio.Cancelled] = []
    with trio.CancelScope() as scope:
        scope.cancel()
        try:
            await trio.lowlevel.checkpoint()
        except trio.Cancelled as exc:
            saved.append(exc)
            raise
    raise saved[0]


async def cancelled_by_hand() -> None:
    raise trio.Cancelled._create()


def thread_cancelled() -> None:
    raise trio.Cancelled._create()


async def cancel_parent_nursery() -> None:
    nursery = trio.lowlevel.current_task().parent_nursery
    assert nursery is not None
    nursery.cancel_scope.cancel()
    await trio.lowlevel.checkpoint()


async def enter_by_hand() -> None:
    trio.move_on_after(LEAK).__enter__()


async def _ticks() -> AsyncIterator[int]:
    with trio.move_on_after(LEAK):
        yield 1
        yield 2


async def generator_scope() -> int:
    async for tick in _ticks():
        return tick
    return 0


class Escape(BaseException):
    """A user's own BaseException subclass (past ``except Exception``)."""


async def base_exception() -> None:
    raise Escape("not an Exception")


POISON: dict[str, Callable[..., Any]] = {
    "reraise-saved": reraise_saved,
    "cancelled-by-hand": cancelled_by_hand,
    "thread-cancelled": thread_cancelled,
    "cancel-parent-nursery": cancel_parent_nursery,
    "enter-by-hand": enter_by_hand,
    "generator-scope": generator_scope,
    "base-exception": base_exception,
}


async def canary(n: int, wait: float = 0.0) -> int:
    """An innocent job: it waits (in the slot task a poison job ran in), then answers."""
    if wait:
        await trio.sleep(wait)
    await trio.lowlevel.checkpoint()
    return n + 1


async def reach_up() -> None:
    """Past its slot: cancel the worker's own jobs nursery (two nurseries up). No slot can
    contain that; the worker must fail loudly, not stop as if asked to."""
    slot = trio.lowlevel.current_task().parent_nursery
    assert slot is not None
    jobs = slot.parent_task.parent_nursery
    assert jobs is not None
    jobs.cancel_scope.cancel()
    await trio.sleep_forever()


def register(q: echomq.Queue, **options: Any) -> None:
    """The poison tasks, ``canary`` and ``reach-up`` on ``q`` (``options``: each task's)."""
    for name, fn in POISON.items():
        q.task(name=name, **options)(fn)
    q.task(name="canary", **options)(canary)
    q.task(name="reach-up", **options)(reach_up)


queue = echomq.Queue(os.environ.get("EMQ_TEST_QUEUE", "isolation"))
register(queue, backoff=0)
