"""Soft time limits: :class:`~echomq.errors.SoftTimeLimit` raised inside a running job.

Rule 1: an async task is driven through :func:`soft_limited`, a trampoline between trio
and the task's coroutine. Each time the task waits, the trampoline waits for it inside a
``trio.CancelScope`` whose deadline is the soft limit, entered after the task's code
yielded and left before it resumes (so the task's own scopes nest as they should). When
that scope's deadline interrupts a wait, the task gets ``SoftTimeLimit`` there instead of
``Cancelled``, once: unlike a cancellation it is an ordinary exception, so the task may
catch it and go on awaiting (to clean up, or to return what it has). A cancellation from
outside (a cancel request, a hard timeout) passes through untouched. A task that never
waits is not interrupted (nothing in trio can interrupt it): it meets the limit at its
next wait.
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
import types
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, TypeVar

import outcome
import trio

from ..errors import SoftTimeLimit

__all__ = ["ThreadCall", "run_with_alarm", "soft_limited"]

T = TypeVar("T")


@types.coroutine
def _drive(coro: Coroutine[Any, Any, T], deadline: float, message: str) -> Generator[Any, Any, T]:
    send: Any = None
    throw: BaseException | None = None
    fired = False
    while True:
        try:
            if throw is not None:
                exc, throw = throw, None
                trap = coro.throw(exc)
            else:
                trap = coro.send(send)
        except StopIteration as stop:
            value: T = stop.value
            return value
        if fired:
            try:
                send = yield trap
            except BaseException as exc:  # (trio sends outcomes; a throw is passed on)
                throw = exc
            continue
        try:
            with trio.CancelScope(deadline=deadline) as scope:
                send = yield trap
        except BaseException as exc:
            throw = exc
            continue
        if (
            scope.cancel_called
            and isinstance(send, outcome.Error)
            and isinstance(send.error, trio.Cancelled)
            and trio.current_effective_deadline() > trio.current_time()  # not also outside
        ):
            fired = True
            send = outcome.Error(SoftTimeLimit(message))


async def soft_limited(coro: Coroutine[Any, Any, T], deadline: float, message: str) -> T:
    """Await ``coro``; at ``deadline`` (trio time) its current wait raises SoftTimeLimit."""
    return await _drive(coro, deadline, message)


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
