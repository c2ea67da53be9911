"""The slot pool: long-lived trio tasks that run claimed jobs, one job at a time each.

This module is the one room of hand-driven trio in the worker: slot tasks parked and
rescheduled by hand, a cancel scope entered by hand and shared across a run of jobs, a
job's coroutine driven step by step, and the reads of trio internals that keep the shared
scope sound. It is here because a task and a scope per job are most of a no-op job's cost
in trio; ``python -m benchmarks cpu_per_job`` guards that cost. Outside, the pool is
``pool.start(claimed, held)``, ``pool.close()``, ``pool.unstarted()``, and
:func:`soft_limited` for a job's soft time limit.

Rule 1 (slot tasks): a job given a slot joins the pool's queue; an idle slot task is woken
for it only when none is on duty (woken and not yet parked, and not waiting inside a job),
or a new slot task is started in the jobs nursery when none is idle. A slot task on duty
runs the queued jobs one after another until the queue is empty, then parks: a batch of
jobs that never wait costs one wakeup, not one per job. The moment a job waits (its first
trio checkpoint) its slot task goes off duty, and another is woken for the rest of the
queue, so no queued job waits behind a running one. There are at most as many slot tasks
as jobs running at once (``concurrency``). A slot task is named ``job <id>`` while it runs
that job (the watchdog reads it).
Rule 2 (context): each job runs in a fresh copy of the context the slot tasks were made in
(:func:`_in_context`): a context variable a job sets is not seen by the next job of the
same slot task.
Rule 3 (closing): :meth:`SlotPool.close` ends the idle slot tasks, and each busy one once
its job is done, so the jobs nursery can exit; a cancelled jobs nursery ends them too (a
parked slot task takes the cancellation; a busy one ends with its job's ``Cancelled``).
Rule 4 (the slot scope): a slot task holds one cancel scope, its :class:`SlotScope`,
entered before its first job and left when it ends. A job runs its handler in it: while
the handler runs, it is that job's scope and no other job's (``Held.running``), so a run
of jobs enters one scope, not one per job. A scope cancelled for a job (a stop, its
deadline) is left at once, when the handler is out; the next job gets a fresh one.
Rule 5 (isolation): a job's trio mistakes stay the job's. Sharing a scope across jobs is
only sound because, once each handler is out, :meth:`SlotScope.end` checks that the job
left the slot task as it found it, before any checkpoint (what it finds is that job's
failure: ``outcome.py``):
- the task's innermost cancel scope must be the slot scope again. A scope the job left
  open (entered by hand, or held by an async generator suspended at its ``yield``) is
  closed by closing the slot scope: trio's own repair (``CancelScope._close`` on a
  misnested exit: the inner scopes are abandoned, left cancelled and detached, and a
  ``RuntimeError`` says so, which is caught here); the next job gets a fresh scope. A stack
  trio cannot bring back to where the scope was entered, or a nursery left open (trio
  fails the task when it exits), makes the slot task unusable: it ends and the pool
  replaces it (rule 6).
- a ``Cancelled`` out of the handler belongs to the slot scope's own cancellation (a stop:
  the scope catches it), to its deadline (a timed job's timeout), to the worker's (an
  enclosing scope is cancelled: it passes), or to nothing: a stray one (re-raised outside
  the scope that caught it, made by hand) is the job's failure, not a reason to end the
  slot task, which would take the worker down.
- the slot task's own nursery (rule 6) must not be cancelled: only a job can do that.
These checks read trio internals (``Task._cancel_status``, ``CancelStatus``,
``Task._child_nurseries``): they live here, next to the hand-entered scope they guard.
Rule 6: each slot task runs in a nursery of its own, opened by a small host task in the
jobs nursery, so a job's ``current_task().parent_nursery`` is its slot's: cancelling it
ends that slot task only (the job fails, rule 5), and the pool starts another for the
queued jobs. A slot task a job made unusable ends the same way; what trio raises when it
exits (a nursery it left open) is logged by its host, never raised into the jobs nursery.
Rule 7 (soft time limits): an async task with a ``soft_timeout`` is driven through
:func:`soft_limited`, a trampoline between trio and the task's coroutine. Each time the
task waits, the trampoline waits for it inside a cancel scope whose deadline is the soft
limit, entered after the task's code yielded and left before it resumes (so the task's
own scopes nest as they should). When that scope interrupts a wait, the task gets
``SoftTimeLimit`` there instead of ``Cancelled``, once: an ordinary exception, which the
task may catch and go on awaiting. A cancellation from outside passes through untouched.
A task that never waits meets the limit at its next wait. Only such tasks pay for it.
"""

from __future__ import annotations

import contextvars
import enum
import logging
import math
import types
from collections import deque
from collections.abc import Callable, Coroutine, Generator
from typing import Any, TypeVar

import attrs
import outcome
import trio

from .._model.job import Claimed
from ..errors import SoftTimeLimit
from .cancellation import Held

__all__ = ["Ending", "SlotPool", "SlotScope", "soft_limited"]

log = logging.getLogger("echomq.worker")

T = TypeVar("T")
Run = Callable[[Claimed, Held], Coroutine[Any, Any, None]]


class Ending(enum.Enum):
    """How a job's run in its slot scope ended, once its handler is out (rule 5)."""

    HANDLER = "handler"  # nothing wrong: what the handler returned or raised decides
    STOPPED = "stopped"  # a stop of the worker's cancelled the scope: it caught the Cancelled
    TIMED_OUT = "timed out"  # the scope's deadline (the job's timeout) caught the Cancelled
    PASSED = "passed"  # the worker itself is cancelled: the Cancelled goes on
    # the job's failures (the value is its reason)
    LEFT_OPEN = (
        "RuntimeError: the task left a cancel scope open when it ended (one entered by hand, "
        "a nursery's, or one an async generator holds at its yield: iterate such a "
        "generator under 'async with contextlib.aclosing(...)'); the worker closed it"
    )
    STRAY = (
        "RuntimeError: the task raised trio.Cancelled that no cancellation of this job asked "
        "for (one re-raised outside the scope that caught it, or made by hand)"
    )
    SLOT_CANCELLED = (
        "RuntimeError: the task cancelled its slot task's nursery "
        "(trio.lowlevel.current_task().parent_nursery belongs to the worker)"
    )


class SlotScope:
    """A slot task's cancel scope, shared by the jobs it runs (rule 4): entered by the slot
    task, left by it or, once cancelled or misused, by :meth:`end` for the job it ended."""

    __slots__ = ("_outer", "_status", "_task", "broken", "cancelled", "host", "scope")

    def __init__(self, host: trio.CancelScope | None = None) -> None:
        self.scope: trio.CancelScope | None = None
        self.cancelled = False  # :meth:`cancel` cancelled the scope (a stop; not a deadline)
        self.host = host  # the scope of the slot task's own nursery (rule 6)
        self.broken = False  # a job left the slot task unusable: it ends (rule 5)
        self._task: Any = None  # (trio.lowlevel.Task: its private fields are read)
        self._status: Any = None  # the scope's CancelStatus (trio's)
        self._outer: Any = None  # the task's CancelStatus outside the scope

    def enter(self) -> trio.CancelScope:
        """Enter a fresh scope (the current task's innermost from now on)."""
        task = self._task = trio.lowlevel.current_task()
        scope = self.scope = trio.CancelScope()
        self.cancelled = False
        self._outer = task._cancel_status
        scope.__enter__()
        self._status = task._cancel_status
        return scope

    def cancel(self) -> None:
        """Cancel the scope (stopping the job that runs in it)."""
        if self.scope is not None:
            self.cancelled = True
            self.scope.cancel()

    def limit(self, deadline: float) -> None:
        """The job that runs next in the scope is cancelled at ``deadline`` (its timeout;
        :meth:`end` lifts it again)."""
        assert self.scope is not None
        self.scope.deadline = deadline

    def leave(self, exc: BaseException | None = None) -> bool:
        """Leave the scope, as a ``with`` block would with ``exc`` propagating; True when
        the scope caught it (a ``Cancelled`` of its own)."""
        scope = self.scope
        assert scope is not None
        self.scope = None
        if exc is None:
            return scope.__exit__(None, None, None)
        return scope.__exit__(type(exc), exc, exc.__traceback__)

    def clean(self) -> bool:
        """Whether the job that just ran left nothing for :meth:`end` to look at: the scope
        is the task's innermost again, and not cancelled (from inside or outside; its own
        cancel and its host's make it effectively cancelled too)."""
        status = self._status
        return self._task._cancel_status is status and not status.effectively_cancelled

    def end(self, exc: BaseException | None, cancelled: bool) -> Ending:
        """Rule 5, once a job's handler returned (``exc`` None) or raised ``exc``
        (``cancelled``: nothing but trio's ``Cancelled``); before any checkpoint. A scope
        that was cancelled or misused is left (the slot task enters a fresh one); one that
        was not is kept for the next job, its deadline lifted."""
        scope = self.scope
        assert scope is not None
        if self._task._cancel_status is not self._status:
            return self._repair()
        host = self.host
        if host is not None and host.cancel_called:  # only a job of this slot does that
            self.broken = True
            self.leave()
            return Ending.SLOT_CANCELLED
        if scope.cancel_called:  # a stop of the worker's, or the job's deadline
            stopped = self.cancelled
            if not cancelled:
                self.leave()
                return Ending.HANDLER
            if not self.leave(exc):  # the worker is cancelled as well
                return Ending.PASSED
            return Ending.STOPPED if stopped else Ending.TIMED_OUT
        if cancelled:
            if self._status.effectively_cancelled:  # the worker's: it goes on
                self.leave(exc)
                return Ending.PASSED
            ending = Ending.STRAY
        else:
            ending = Ending.HANDLER
        if scope.deadline != math.inf:
            scope.deadline = math.inf
        return ending

    def _repair(self) -> Ending:
        """The task's innermost scope is not the slot scope: close it, so trio closes what
        the job left open inside it (and raises RuntimeError for it, caught here)."""
        scope = self.scope
        assert scope is not None
        self.scope = None
        try:
            scope.__exit__(None, None, None)
        except RuntimeError:  # "Cancel scope stack corrupted": trio repaired it
            pass
        task = self._task
        if task._cancel_status is not self._outer or task._child_nurseries:
            self.broken = True  # beyond repair in place: the slot task ends
        return Ending.LEFT_OPEN


@attrs.define(eq=False)
class SlotPool:
    """The slot tasks of one worker; ``run(claimed, held)`` runs one job."""

    nursery: trio.Nursery
    run: Run
    started: int = 0  # slot tasks started (at most the jobs running at once)
    wakeups: int = 0  # idle slot tasks woken (rule 1: per batch of jobs, not per job)
    _queue: deque[tuple[Claimed, Held]] = attrs.field(factory=deque, init=False)
    _idle: list[trio.lowlevel.Task] = attrs.field(factory=list, init=False)
    _on_duty: int = attrs.field(default=0, init=False)
    _closed: bool = attrs.field(default=False, init=False)
    # rule 2: the context the slot tasks are made in
    _base: contextvars.Context = attrs.field(factory=contextvars.copy_context, init=False)

    @property
    def queued(self) -> int:
        """Jobs given a slot, not yet started by a slot task."""
        return len(self._queue)

    def start(self, job: Claimed, held: Held) -> None:
        """Run ``job`` in a slot task (no checkpoint here)."""
        if self._closed:
            raise RuntimeError("the slot pool is closed")
        self._queue.append((job, held))
        if not self._on_duty:
            self._wake()

    def unstarted(self) -> list[tuple[Claimed, Held]]:
        """Take the queued jobs no slot task will start: the jobs nursery is gone (a
        worker that failed, or was cancelled from outside)."""
        queued = list(self._queue)
        self._queue.clear()
        return queued

    def close(self) -> None:
        """End every slot task once it is idle (rule 3)."""
        self._closed = True
        while self._idle:
            trio.lowlevel.reschedule(self._idle.pop(), outcome.Value(False))

    def _wake(self) -> None:
        self._on_duty += 1
        if self._idle:
            self.wakeups += 1
            trio.lowlevel.reschedule(self._idle.pop(), outcome.Value(True))
            return
        self.started += 1
        self._base.run(self.nursery.start_soon, self._host)

    def _off_duty(self) -> None:
        """The running job waits: another slot task takes the queue (rule 1)."""
        self._on_duty -= 1
        if self._queue and not self._on_duty:  # (even closing: a queued job still runs)
            self._wake()

    async def _host(self) -> None:
        """Rule 6: a slot task in a nursery of its own."""
        scope = SlotScope()
        try:
            async with trio.open_nursery() as own:
                scope.host = own.cancel_scope
                own.start_soon(self._slot, scope)
        except BaseExceptionGroup as group:
            if not scope.broken:
                raise
            # what trio raised as the broken slot task exited (a nursery a job left open)
            cancelled, rest = group.split(trio.Cancelled)
            if rest is not None:
                first = rest.exceptions[0] if len(rest.exceptions) == 1 else rest
                log.error(
                    "a slot task a job had made unusable ended (%s: %s); another replaces it",
                    type(first).__name__,
                    str(first).split("\n", 1)[0],
                )
            if cancelled is not None:
                raise cancelled from None

    async def _slot(self, scope: SlotScope) -> None:
        task = trio.lowlevel.current_task()
        base = task.context.copy()  # rule 2: each job starts from this one
        queue, idle, run = self._queue, self._idle, self.run
        wait = trio.lowlevel.wait_task_rescheduled

        def abort(_: object) -> trio.lowlevel.Abort:  # a cancelled park (made once per task)
            idle.remove(task)
            return trio.lowlevel.Abort.SUCCEEDED

        on_duty = True
        try:
            while True:
                while queue:
                    job, held = queue.popleft()
                    task.name = "job " + job.id  # as a task per job was named (the watchdog's)
                    if scope.scope is None:  # rule 4: the first job, or one cancelled in it
                        scope.enter()
                    held.slot = scope
                    await _in_context(base.copy(), run(job, held), self)
                    if scope.broken:  # rule 5: unusable now; the queue goes to another
                        on_duty = False
                        self._off_duty()
                        return
                on_duty = False
                self._on_duty -= 1
                if self._closed:
                    return
                idle.append(task)  # parked until start() (or close()) reschedules it
                if not await wait(abort):
                    return
                on_duty = True  # (start() counted it when it woke it)
        except BaseException as exc:  # (its slot scope, not cancelled, never catches it)
            if scope.scope is None or not scope.leave(exc):
                raise
        finally:
            if on_duty:  # ended by its job's Cancelled (the nursery's queue dies with it)
                self._on_duty -= 1
            if scope.scope is not None:  # ended: closed
                scope.leave()


@types.coroutine
def _in_context(
    ctx: contextvars.Context, coro: Coroutine[Any, Any, None], pool: SlotPool
) -> Generator[Any, Any, None]:
    """Await ``coro`` with every step of it run in ``ctx`` (rule 2: what a task of its own
    would give the job, without one). Its first wait takes the slot task off duty."""
    try:
        msg = ctx.run(coro.send, None)
    except StopIteration:
        return  # done without waiting: the common case, no trio step of its own
    pool._off_duty()
    try:
        while True:
            try:
                value = yield msg
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:
                try:
                    msg = ctx.run(coro.throw, exc)
                except StopIteration:
                    return
            else:
                try:
                    msg = ctx.run(coro.send, value)
                except StopIteration:
                    return
    finally:
        pool._on_duty += 1  # back in the loop (or ending: see _slot)


@types.coroutine
def _soft_drive(
    coro: Coroutine[Any, Any, T], deadline: float, message: str
) -> Generator[Any, Any, T]:
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
    """Await ``coro``; at ``deadline`` (trio time) its current wait raises SoftTimeLimit
    (rule 7)."""
    return await _soft_drive(coro, deadline, message)
