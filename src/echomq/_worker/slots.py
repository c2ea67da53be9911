"""Slot tasks: long-lived trio tasks that run claimed jobs, one job at a time each.

Rule 1: a claimed job that has a slot joins the slot tasks' queue; an idle slot task is
woken for it only when none is on duty (on duty: woken and not yet parked, and not
waiting inside a job), or a new slot task is started in the jobs nursery when none is
idle. A slot task on duty runs the queued jobs one after another until the queue is
empty, then parks: a batch of jobs that never wait costs one wakeup, not one per job
(no task is made per job, and no park and reschedule per job). The moment a job waits
(its first trio checkpoint) its slot task goes off duty, and another is woken for the
rest of the queue, so no queued job waits behind a running one. There are at most as
many slot tasks as jobs running at once (``concurrency``). The job still runs in its
own ``trio.CancelScope`` (``execution.py``, rule 1): a slot task only carries it (rule 4).
Fairness: the jobs a slot task runs in one go are the queued ones, at most the free
slots (``concurrency``): the same jobs that, one task each, ran in one scheduler tick.
The slot task is named ``job <id>`` while it runs that job (the watchdog reads it).
Rule 2: each job runs in a fresh copy of the context the slot tasks were made in (the
consumer's; ``_in_context``): a context variable a job sets is not seen by the next job
of the same slot task, nor by the tasks this module starts.
Rule 3: :meth:`Slots.close` ends the idle slot tasks, and each busy one once its job is
done, so the jobs nursery can exit; a cancelled jobs nursery ends them too (a parked
slot task takes the cancellation; a busy one ends with its job's ``Cancelled``).
Rule 4: a slot task holds one cancel scope, its :class:`Lane` (``cancellation.py`` rule 5),
entered before its first job and left when it ends: a plain job runs its handler in it (the
job's scope while it runs), so a run of jobs enters one scope, not one per job. A job
cancelled in it leaves it (the runner does, at once); the next job gets a fresh one.
"""

from __future__ import annotations

import contextvars
import types
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any

import attrs
import outcome
import trio

from .._model.job import Claimed
from .cancellation import Held, Lane

__all__ = ["Slots"]

Run = Callable[[Claimed, Held], Coroutine[Any, Any, None]]


@attrs.define(eq=False)
class Slots:
    """The slot tasks of one consumer."""

    nursery: trio.Nursery
    run: Run
    started: int = 0  # slot tasks started (at most the jobs running at once)
    wakeups: int = 0  # idle slot tasks woken (rule 1: per batch of jobs, not per job)
    _queue: deque[tuple[Claimed, Held]] = attrs.field(factory=deque, init=False)
    _idle: list[trio.lowlevel.Task] = attrs.field(factory=list, init=False)
    _on_duty: int = attrs.field(default=0, init=False)
    _closed: bool = attrs.field(default=False, init=False)
    # rule 2: the context the slot tasks (and spawn()'s tasks) are made in
    _base: contextvars.Context = attrs.field(factory=contextvars.copy_context, init=False)

    @property
    def queued(self) -> int:
        """Jobs given a slot, not yet started by a slot task."""
        return len(self._queue)

    def start(self, job: Claimed, held: Held) -> None:
        """Run ``job`` in a slot task (no checkpoint here)."""
        if self._closed:
            raise RuntimeError("the slots are closed")
        self._queue.append((job, held))
        if not self._on_duty:
            self._wake()

    def unstarted(self) -> list[tuple[Claimed, Held]]:
        """Take the queued jobs no slot task will start: the jobs nursery is gone (a
        worker that failed, or was cancelled from outside)."""
        queued = list(self._queue)
        self._queue.clear()
        return queued

    def spawn(self, fn: Callable[[Any], Awaitable[None]], arg: Any) -> None:
        """Start ``fn(arg)`` in the jobs nursery, in a copy of the slots' base context
        (not the context of the job that asked)."""
        self._base.run(self.nursery.start_soon, fn, arg)

    def _wake(self) -> None:
        self._on_duty += 1
        if self._idle:
            self.wakeups += 1
            trio.lowlevel.reschedule(self._idle.pop(), outcome.Value(True))
            return
        self.started += 1
        self._base.run(self.nursery.start_soon, self._slot)

    def _off_duty(self) -> None:
        """The running job waits: another slot task takes the queue (rule 1)."""
        self._on_duty -= 1
        if self._queue and not self._on_duty:  # (even closing: a queued job still runs)
            self._wake()

    def close(self) -> None:
        """End every slot task once it is idle (rule 3)."""
        self._closed = True
        while self._idle:
            trio.lowlevel.reschedule(self._idle.pop(), outcome.Value(False))

    async def _slot(self) -> None:
        task = trio.lowlevel.current_task()
        base = task.context.copy()  # rule 2: each job starts from this one
        queue, idle, run = self._queue, self._idle, self.run
        wait = trio.lowlevel.wait_task_rescheduled

        def abort(_: object) -> trio.lowlevel.Abort:  # a cancelled park (made once per task)
            idle.remove(task)
            return trio.lowlevel.Abort.SUCCEEDED

        lane = Lane()  # rule 4
        on_duty = True
        try:
            while True:
                while queue:
                    job, held = queue.popleft()
                    task.name = "job " + job.id  # as a task per job was named (the watchdog's)
                    if lane.scope is None:  # rule 4: the first job, or one cancelled in it
                        lane.enter()
                    held.lane = lane
                    await _in_context(base.copy(), run(job, held), self)
                on_duty = False
                self._on_duty -= 1
                if self._closed:
                    return
                idle.append(task)  # parked until start() (or close()) reschedules it
                if not await wait(abort):
                    return
                on_duty = True  # (start() counted it when it woke it)
        except BaseException as exc:  # (its lane scope, not cancelled, never catches it)
            if lane.scope is None or not lane.leave(exc):
                raise
        finally:
            if on_duty:  # ended by its job's Cancelled (the nursery's queue dies with it)
                self._on_duty -= 1
            if lane.scope is not None:  # ended: closed
                lane.leave()


@types.coroutine
def _in_context(
    ctx: contextvars.Context, coro: Coroutine[Any, Any, None], slots: Slots
) -> Generator[Any, Any, None]:
    """Await ``coro`` with every step of it run in ``ctx`` (rule 2: what a task of its own
    would give the job, without one). Its first wait takes the slot task off duty."""
    try:
        msg = ctx.run(coro.send, None)
    except StopIteration:
        return  # done without waiting: the common case, no trio step of its own
    slots._off_duty()
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
        slots._on_duty += 1  # back in the loop (or ending: see _slot)
