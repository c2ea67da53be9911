"""Soft time limits of thread and process tasks, and the alarm they share.

Rule 1: an async task's soft limit is the slot pool's (``pool.soft_limited``: a trampoline
between trio and the task's coroutine, hand-driven trio, so it lives in the pool).
Rule 2: a sync task's thread gets ``SoftTimeLimit`` asynchronously
(``PyThreadState_SetAsyncExc``): it is raised at the thread's next Python instruction; a
blocking C call (``time.sleep``, a socket read) is not interrupted, it raises when it
returns. A call that already returned is not hit (the injection is taken back).
Rule 3: a process task's child arms a timer of its own (``processes.py``, SIGALRM), which
does interrupt a sleep.
Only tasks with a ``soft_timeout`` go through any of this.
"""

from __future__ import annotations

import ctypes
import math
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import outcome
import trio

from ..errors import SoftTimeLimit

__all__ = ["ThreadCall", "run_with_alarm"]

T = TypeVar("T")


async def run_with_alarm(
    deadline: float, alarm: Callable[[], object], body: Callable[[], Awaitable[T]]
) -> T:
    """``await body()``; if it is still running at ``deadline`` (trio time), call
    ``alarm()`` once. What the body raises comes out as itself (no exception group)."""
    done: list[outcome.Outcome[T]] = []
    async with trio.open_nursery() as nursery:

        async def timer() -> None:
            await trio.sleep_until(deadline)
            alarm()

        nursery.start_soon(timer)
        done.append(await outcome.acapture(body))
        nursery.cancel_scope.cancel()
    return done[0].unwrap()


_set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
_set_async_exc.argtypes = (ctypes.c_ulong, ctypes.py_object)
_set_async_exc.restype = ctypes.c_int


class ThreadCall:
    """A sync task's call, run in a worker thread, that a soft limit can reach (rule 2)."""

    def __init__(self, fn: Callable[[], T]) -> None:
        self._fn = fn
        self._lock = threading.Lock()
        self._ident: int | None = None
        self._running = False
        self.hit = False

    def __call__(self) -> Any:
        with self._lock:
            self._ident = threading.get_ident()
            self._running = True
        try:
            return self._fn()
        finally:
            with self._lock:
                self._running = False
                if self.hit:  # an injection that raced the return: take it back
                    _set_async_exc(self._ident, ctypes.py_object())

    def soft_limit(self) -> bool:
        """Raise SoftTimeLimit in the thread, if the call still runs; True if sent."""
        with self._lock:
            if not self._running or self._ident is None or self.hit:
                return False
            self.hit = True
            sent: int = _set_async_exc(self._ident, ctypes.py_object(SoftTimeLimit))
            return sent == 1

    async def run(self, soft_deadline: float | None) -> Any:
        """Run in a thread (abandoned, never interrupted, when cancelled); at
        ``soft_deadline`` (trio time) the thread gets SoftTimeLimit."""
        if soft_deadline is None or soft_deadline == math.inf:
            return await trio.to_thread.run_sync(self, abandon_on_cancel=True)

        async def body() -> Any:
            return await trio.to_thread.run_sync(self, abandon_on_cancel=True)

        return await run_with_alarm(soft_deadline, self.soft_limit, body)
