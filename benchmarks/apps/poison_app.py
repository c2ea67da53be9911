"""The worker app of ``python -m benchmarks poison_mix``: an innocent ``canary`` and one task
per way a job can misuse trio or raise past ``Exception``.

The queue's name comes from ``$EMQ_BENCH_QUEUE``; the workers are started as
``echomq worker benchmarks.apps.poison_app:queue`` from the repository root. Each poison
task, every attempt, does what a user's buggy code would: re-raise a ``trio.Cancelled``
saved from a scope of its own after that scope closed, raise one made by hand, cancel the
parent nursery's scope, enter ``move_on_after`` by hand and return, return from inside an
``async for`` over a generator holding ``move_on_after``, raise a ``BaseException``
subclass of its own.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import trio
import trio.lowlevel

import echomq

LEAK = 0.05  # seconds: the deadline of a scope a poison job leaves open

queue = echomq.Queue(os.environ.get("EMQ_BENCH_QUEUE", "poison-mix"))


class Escape(BaseException):
    """A user's BaseException subclass (not an Exception)."""


async def reraise_saved() -> None:
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


async def base_exception() -> None:
    raise Escape("a BaseException subclass of the job's own")


#: task name -> the poison job's code
POISON: dict[str, Callable[..., Any]] = {
    "reraise-saved": reraise_saved,
    "cancelled-by-hand": cancelled_by_hand,
    "cancel-parent-nursery": cancel_parent_nursery,
    "enter-by-hand": enter_by_hand,
    "generator-scope": generator_scope,
    "base-exception": base_exception,
}


async def canary(n: int) -> int:
    """An innocent job: a checkpoint in the slot a poison job may have run in, then n + 1."""
    await trio.lowlevel.checkpoint()
    return n + 1


for _name, _fn in POISON.items():
    queue.task(name=_name, backoff=0)(_fn)
queue.task(name="canary")(canary)
