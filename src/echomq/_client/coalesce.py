"""Concurrent single enqueues on one trio connection coalesced into bulk script calls.

An ``enqueue.lua`` call has a fixed server cost (EVALSHA, the includes, ``mark_queue``, the
``seq`` bump...) larger than its per-job part, so many tasks each enqueuing one job on the
same connection pay it once per job. :class:`EnqueueCoalescer` sends a caller's job at
once when no enqueue of its own is in flight (a lone producer waits for nothing); while one
is, callers queue, and when it answers everything queued goes as one call (chunks of at
most ``MAX_ENQUEUE`` jobs and ``config.MAX_BATCH_BYTES`` payload bytes). No timers.

Each caller's job is gated in its own task before it is queued (a bad job fails its caller
alone, before any I/O), and each caller gets its own answer, as a lone
:func:`~echomq.jobs.lifecycle.enqueue_batch` of its one job would: an :class:`Enqueued`,
or that call's error. ``EMQDUP`` refuses a whole call, so a refused batch is sent again one
job per call (each caller gets its own ``DuplicateJob`` or id); any other error (the
connection lost, a script error) reaches every caller of the batch. A caller cancelled
while its job is queued takes it out (never sent); once sent, the job may be enqueued (the
wire's abandoned-reply rule). docs/runtime.md, "Coalesced enqueues".
"""

from __future__ import annotations

import copy
from collections import deque
from typing import TypeAlias

import trio
from outcome import Error, Outcome, Value

from .. import config
from .._model.job import Enqueued, NewJob
from .._scripts import validate as v
from .._scripts.calls import Executor, evaluate
from ..errors import ConnectionLost, DuplicateJob
from ..jobs.lifecycle import EnqueueGroup, enqueue_group, enqueue_sent_call

__all__ = ["Answer", "EnqueueCoalescer"]

#: a job's answer inside the coalescer: None when it was written with the id it was sent
#: with (no value made per job), else an :class:`Enqueued` (deduplicated: the holder's id)
Answer: TypeAlias = Enqueued | None

_current_task = trio.lowlevel.current_task


class _Caller:
    """One queued job and its parked caller (woken with its answer by :meth:`settle`).

    No ``trio.Event`` per caller: the caller parks with ``wait_task_rescheduled`` and is
    rescheduled with its outcome, so a queued call allocates this object alone (it is its
    own ``abort_func``) and no reference cycle (it dies by refcount, not by the collector).
    """

    __slots__ = ("gone", "group", "task")

    def __init__(self, group: EnqueueGroup) -> None:
        self.group = group
        self.task = _current_task()
        # answered, or cancelled (not sent yet: skipped; sent: its answer is dropped)
        self.gone = False

    def __call__(self, _: object) -> trio.lowlevel.Abort:
        """The caller was cancelled while parked (its ``abort_func``: no bound method)."""
        self.gone = True
        return trio.lowlevel.Abort.SUCCEEDED

    def settle(self, answer: Outcome[Answer]) -> None:
        """Wake the caller with ``answer`` (once; not a caller cancelled meanwhile)."""
        if not self.gone:
            self.gone = True
            trio.lowlevel.reschedule(self.task, answer)


class EnqueueCoalescer:
    """Single enqueues of one queue on one trio connection, sent in bulk when concurrent.

    ``nursery``: where a batch of queued callers is sent (a task of the connection's
    lifetime, so no caller's cancellation stops its batch-mates' call). A caller that finds
    nothing in flight sends its own job in its own task.
    """

    def __init__(self, conn: Executor, queue: str, nursery: trio.Nursery) -> None:
        self.conn = conn
        self.queue = queue
        self._nursery = nursery
        self._queued: deque[_Caller] = deque()
        self._busy = False  # an enqueue call of this coalescer is in flight
        self.calls = 0  # script calls sent (a lone job or a batch; each re-send counts)
        self.in_flight = 0  # jobs of the call in flight
        self.crowded = False  # callers queued behind the last lone call (see send_alone)

    @property
    def queued(self) -> int:
        """Callers waiting for the call in flight to answer (cancelled ones included)."""
        return len(self._queued)

    async def enqueue(self, job: NewJob) -> Enqueued:
        """Enqueue ``job``; answer as ``enqueue_batch(conn, queue, [job])[0]`` would.

        Raises:
            InvalidArgument, InvalidKey, SerializationError, PayloadTooLarge: before any I/O.
            DuplicateJob: a row with the job's id exists; nothing was written.
            ConnectionLost, Unavailable, ScriptError...: as a lone call would.
        """
        group = enqueue_group(job)
        answer = await self.enqueue_gated(group)
        return Enqueued(id=group.id) if answer is None else answer

    async def enqueue_gated(self, group: EnqueueGroup) -> Answer:
        """:meth:`enqueue` of a job gated already (:func:`enqueue_group`), answering its
        :data:`Answer`."""
        caller = self.join(group)
        if caller is None:
            return await self.send_alone(group)
        answer: Answer = await trio.lowlevel.wait_task_rescheduled(caller)
        return answer

    def join(self, group: EnqueueGroup) -> _Caller | None:
        """Queue a gated job behind the call in flight, or answer None when nothing is in
        flight: the caller then sends it itself, ``await send_alone(group)``, with no
        checkpoint between (the coalescer is busy from here until that call answers).

        A queued caller parks with ``await trio.lowlevel.wait_task_rescheduled(caller)``
        and is woken with its :data:`Answer` or its error. Cancelled while parked: ``gone``
        (not sent yet: never will be; sent: nobody reads the answer). :meth:`enqueue_gated` is
        the two steps written out (``Task.delay`` takes them itself: one coroutine less).
        """
        if not self._busy:
            self._busy = True
            return None
        caller = _Caller(group)
        self._queued.append(caller)
        return caller

    async def send_alone(self, group: EnqueueGroup) -> Answer:
        """Send the job :meth:`join` answered None for, in this task; then send what
        queued meanwhile (in the nursery), or go idle.

        When the last lone call had callers queued behind it (``crowded``: callers come
        together, e.g. a nursery of producers started at once), the tasks ready to run
        run first, once (a cancel-shielded checkpoint: nothing is sent yet, and this
        caller cannot be cancelled there); if callers queued meanwhile, this job goes
        first in their batch, sent from the nursery like any batch (this caller parks as a
        queued one): one call instead of a lone one and then the rest. A lone producer
        (nothing queued behind its calls) never waits."""
        if self.crowded:
            await trio.lowlevel.cancel_shielded_checkpoint()
            if self._queued:
                caller = _Caller(group)
                try:
                    self._nursery.start_soon(self._drain)
                except RuntimeError:  # the queue's nursery is closed: this job goes alone
                    pass
                else:
                    self._queued.appendleft(caller)
                    answer: Answer = await trio.lowlevel.wait_task_rescheduled(caller)
                    return answer
        self.calls += 1
        self.in_flight = 1
        try:
            return (await evaluate(self.conn, enqueue_sent_call(self.queue, [group])))[0]
        finally:
            self.in_flight = 0
            self._next()

    async def _call(self, groups: list[EnqueueGroup]) -> list[Answer]:
        self.calls += 1
        self.in_flight = len(groups)
        try:
            return await evaluate(self.conn, enqueue_sent_call(self.queue, groups))
        finally:
            self.in_flight = 0

    def _next(self) -> None:
        """The call in flight answered: send what queued meanwhile, or go idle."""
        self.crowded = bool(self._queued)
        if not self._queued:
            self._busy = False
            return
        try:
            self._nursery.start_soon(self._drain)
        except RuntimeError:  # the queue's nursery is closed: its block has ended
            self._busy = False
            _fail(self._queued, RuntimeError(f"queue {self.queue!r} closed"))
            self._queued.clear()

    def _take(self) -> list[_Caller]:
        """The next batch: queued callers still waiting, up to the call's caps."""
        batch: list[_Caller] = []
        size = 0
        while self._queued and len(batch) < v.MAX_ENQUEUE:
            caller = self._queued[0]
            if caller.gone:
                self._queued.popleft()
                continue
            size += len(caller.group.payload)
            if batch and size > config.MAX_BATCH_BYTES:
                break
            batch.append(self._queued.popleft())
        return batch

    async def _drain(self) -> None:
        """Send the queued callers, batch after batch, until none is left."""
        batch: list[_Caller] = []
        try:
            while batch := self._take():
                await self._send(batch)
            batch = []
        finally:
            self._busy = False
            if batch or self._queued:  # cancelled: the connection is closing
                _fail(batch, ConnectionLost("the queue's connection closed with the job sent"))
                _fail(self._queued, RuntimeError(f"queue {self.queue!r} closed"))
                self._queued.clear()

    async def _send(self, batch: list[_Caller]) -> None:
        try:
            answers = await self._call([caller.group for caller in batch])
        except DuplicateJob as exc:
            if len(batch) == 1:
                batch[0].settle(Error(exc))
            else:
                await self._one_by_one(batch)  # the refused call wrote nothing
            return
        except Exception as exc:
            _fail(batch, exc)
            return
        for caller, answer in zip(batch, answers, strict=True):
            caller.settle(Value(answer))

    async def _one_by_one(self, batch: list[_Caller]) -> None:
        """A batch refused by ``EMQDUP``, sent again one job per call (its callers' own
        answers: a written job, a deduplicated one, or its own ``DuplicateJob``). A caller
        cancelled meanwhile is not sent again: the refused call wrote nothing."""
        for caller in batch:
            if caller.gone:
                continue
            try:
                (answer,) = await self._call([caller.group])
            except Exception as exc:
                caller.settle(Error(exc))
            else:
                caller.settle(Value(answer))


def _fail(callers: list[_Caller] | deque[_Caller], error: BaseException) -> None:
    """Each caller gets ``error`` (a copy of its own when it can be made)."""
    for caller in callers:
        if not caller.gone:
            caller.settle(Error(_copy(error) if len(callers) > 1 else error))


def _copy(error: BaseException) -> BaseException:
    try:
        twin = copy.copy(error)
    except Exception:
        return error
    return twin.with_traceback(None)
