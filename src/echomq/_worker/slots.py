"""Slot tasks: long-lived trio tasks that run claimed jobs, one job at a time each.

Rule 1: a claimed job is handed to an idle slot task (a reschedule: no task is made per
job); when none is idle, a new slot task is started in the jobs nursery, so there are at
most as many as the jobs held at once (``concurrency``). The job still runs in its own
``trio.CancelScope`` (``execution.py``, rule 1): a slot task only carries it.
The slot task is named ``job <id>`` while it runs that job (the watchdog reads it).
Rule 2: each job starts in a fresh copy of the context the slot task was started in: a
context variable a job sets is not seen by the next job of the same slot.
Rule 3: :meth:`Slots.close` ends the idle slot tasks, and each busy one once its job is
done, so the jobs nursery can exit; a cancelled jobs nursery ends them too (a parked
slot task takes the cancellation; a busy one ends with its job's ``Cancelled``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import attrs
import outcome
import trio

from .._model.job import Claimed
from .cancellation import Held

__all__ = ["Slots"]

Run = Callable[[Claimed, Held], Awaitable[None]]


@attrs.define(eq=False)
class Slots:
    """The slot tasks of one consumer."""

    nursery: trio.Nursery
    run: Run
    started: int = 0  # slot tasks started (at most the jobs held at once)
    _idle: list[trio.lowlevel.Task] = attrs.field(factory=list, init=False)
    _closed: bool = attrs.field(default=False, init=False)

    def start(self, job: Claimed, held: Held) -> None:
        """Run ``job`` in an idle slot task, or in a new one (no checkpoint here)."""
        if self._closed:
            raise RuntimeError("the slots are closed")
        if self._idle:
            trio.lowlevel.reschedule(self._idle.pop(), outcome.Value((job, held)))
            return
        self.started += 1
        self.nursery.start_soon(self._slot, job, held)

    def close(self) -> None:
        """End every slot task once it is idle (rule 3)."""
        self._closed = True
        while self._idle:
            trio.lowlevel.reschedule(self._idle.pop(), outcome.Value(None))

    async def _slot(self, job: Claimed, held: Held) -> None:
        task = trio.lowlevel.current_task()
        base = task.context.copy()  # rule 2: each job starts from this one
        idle, run, wait = self._idle, self.run, trio.lowlevel.wait_task_rescheduled

        def abort(_: object) -> trio.lowlevel.Abort:  # a cancelled park (made once per task)
            idle.remove(task)
            return trio.lowlevel.Abort.SUCCEEDED

        item: tuple[Claimed, Held] | None = (job, held)
        while item is not None:
            task.name = "job " + item[0].id  # as a task per job was named (the watchdog's)
            await run(*item)
            if self._closed:
                return
            task.context = base.copy()  # taken at the next resumption: the next job's
            idle.append(task)  # parked until start() (or close()) reschedules it
            item = await wait(abort)
