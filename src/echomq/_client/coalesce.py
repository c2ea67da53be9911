"""Concurrent single enqueues on one trio connection coalesced into bulk script calls.

An ``enqueue.lua`` call has a fixed server cost (EVALSHA, the includes, ``mark_queue``, the
``seq`` bump...) larger than its per-job part, so many tasks each enqueuing one job on the
same connection pay it once per job. :class:`Coalescer` sends a caller's job at once when
no enqueue of its own is in flight (a lone producer waits for nothing); while one is,
callers join the open :class:`_Batch` (at most ``MAX_ENQUEUE`` jobs and
``config.MAX_BATCH_BYTES`` payload bytes each), and when the call in flight answers, the
batches go one call each, sent by a task in the queue's nursery. No timers.

Each caller's job is gated in its own task before it joins (a bad job fails its caller
alone, before any I/O), and each caller gets its own answer, as a lone call of its one job
would: the job's ``(id, deduplicated)`` (an existing ``job_id``: that id, deduplicated),
or that call's error. ``EMQDUP`` refuses a whole call, so a refused batch is sent again one
job per call; any other error (the connection lost, a script error) reaches every caller
of the batch (each its own copy). A caller cancelled while its batch waits takes its job
out (never sent); once sent, the job may be enqueued (the wire's abandoned-reply rule).
A batch's callers wait on its :class:`~echomq._wire.connection.Rendezvous` (one small
object per waiter; it says why). docs/runtime.md, "Coalesced enqueues".
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Coroutine, Sequence
from typing import Any

import attrs
import trio

from .. import config
from .._scripts import validate as v
from .._scripts.calls import Executor, evaluate
from .._wire.connection import Connection, Rendezvous
from ..errors import ConnectionLost, DuplicateJob
from ..jobs.lifecycle import Answer, GatedJob, enqueue_gated_call, enqueue_lone

__all__ = ["Coalescer", "Sent"]

#: a job's answer: its id, and whether it was deduplicated (the id is then the job that
#: holds its dedup key, or the existing job of its ``job_id``)
Sent = tuple[str, bool]


def _sent(job: GatedJob, answer: Answer) -> Sent:
    return (job.id, False) if answer is None else (answer.id, answer.deduplicated)


@attrs.define(eq=False)
class _Batch:
    """Jobs of callers queued together, and the callers waiting for their answers (place
    ``i`` of ``callers`` is the caller of ``jobs[i]``)."""

    jobs: list[GatedJob] = attrs.Factory(list)
    size: int = 0  # payload bytes
    callers: Rendezvous[Sent] = attrs.Factory(Rendezvous)

    def places(self) -> list[int]:
        """The places of the callers still waiting."""
        callers = self.callers
        return [i for i in range(len(self.jobs)) if not callers.gone(i)]

    def fail(self, error: BaseException, places: Sequence[int] | None = None) -> None:
        """Each caller (of ``places``, default all) gets ``error``: its own copy when
        there are several."""
        chosen = self.places() if places is None else places
        for i in chosen:
            self.callers.fail(i, _copy(error) if len(chosen) > 1 else error)


class Coalescer:
    """Single enqueues of one queue on one trio connection, sent in bulk when concurrent.

    ``nursery``: where a batch of queued callers is sent (a task of the connection's
    lifetime, so no caller's cancellation stops its batch-mates' call). A caller that finds
    nothing in flight sends its own job in its own task.
    """

    def __init__(self, conn: Executor, queue: str, nursery: trio.Nursery) -> None:
        self.conn = conn
        self.queue = queue
        self._nursery = nursery
        self._batches: deque[_Batch] = deque()
        self._busy = False  # an enqueue call of this coalescer is in flight
        self.calls = 0  # script calls sent (a lone job or a batch; each re-send counts)
        self.in_flight = 0  # jobs of the call in flight
        self.crowded = False  # callers queued behind the last lone call (see send)

    @property
    def queued(self) -> int:
        """Callers waiting for the call in flight to answer (cancelled ones included)."""
        return sum(len(batch.jobs) for batch in self._batches)

    def enqueue(self, job: GatedJob) -> Coroutine[Any, Any, Sent]:
        """The coroutine that enqueues ``job`` (gated) and answers its :data:`Sent`: its
        own call when nothing is in flight (:meth:`send`), else its place in the open
        batch (this caller waits in it from now on: await it next).

        Raises (when awaited):
            ConnectionLost, Unavailable, ScriptError...: as a lone call would.
            RuntimeError: the queue's ``open()`` block ended with the job still queued.
        """
        if self._busy:
            return self._join(job).callers.wait()
        self._busy = True
        return self.send(job)

    async def send(self, job: GatedJob) -> Sent:
        """Send ``job`` from this task (the coalescer is busy); then what queued
        meanwhile goes from the nursery.

        When the last lone call had callers queued behind it (``crowded``: callers come
        together, e.g. a nursery of producers started at once), the tasks ready to run
        run first, once (a shielded checkpoint: nothing is sent yet); if callers queued
        meanwhile, this job goes first in their batch: one call instead of a lone one and
        then the rest. A lone producer (nothing queued behind its calls) never waits.
        """
        if self.crowded:
            batch = self._join(job)  # the first of a new batch
            waiting = batch.callers.wait()
            with trio.CancelScope(shield=True):
                await trio.sleep(0)  # noqa: ASYNC115 - a plain checkpoint, shielded
            if len(batch.jobs) > 1 and self._start_drain():
                return await waiting
            batch.callers.leave(0)  # nobody came (or no nursery): it goes alone
            waiting.close()
            if len(batch.jobs) == 1:
                self._batches.remove(batch)
        self.calls += 1
        self.in_flight = 1
        conn = self.conn
        try:
            if type(conn) is Connection:  # one server's trio wire: packed from a kept head
                answer = await enqueue_lone(conn, self.queue, job)
            else:
                (answer,) = await evaluate(conn, enqueue_gated_call(self.queue, [job]))
        except DuplicateJob:  # its job_id is taken: that job's answer
            return job.id, True
        finally:
            self.in_flight = 0
            self._next()
        return (job.id, False) if answer is None else (answer.id, answer.deduplicated)

    def _join(self, job: GatedJob) -> _Batch:
        """Queue ``job`` last in the open batch (a new one when it is full)."""
        batches = self._batches
        size = len(job.payload)
        if batches:
            batch = batches[-1]
            if len(batch.jobs) < v.MAX_ENQUEUE and batch.size + size <= config.MAX_BATCH_BYTES:
                batch.jobs.append(job)
                batch.size += size
                return batch
        batch = _Batch([job], size)
        batches.append(batch)
        return batch

    def _start_drain(self) -> bool:
        """Send the queued batches from the nursery; False when it is closed."""
        try:
            self._nursery.start_soon(self._drain)
        except RuntimeError:  # the queue's nursery is closed: its block has ended
            return False
        return True

    def _next(self) -> None:
        """The lone call answered: send what queued meanwhile, or go idle."""
        self.crowded = bool(self._batches)
        if not self._batches:
            self._busy = False
        elif not self._start_drain():
            self._busy = False
            self._close_batches(RuntimeError(f"queue {self.queue!r} closed"))

    async def _drain(self) -> None:
        """Send the queued batches, one call each, until none is left."""
        batch: _Batch | None = None
        try:
            while self._batches:
                batch = self._batches.popleft()
                await self._send(batch)
                batch = None
        finally:
            self._busy = False
            if batch is not None:  # cancelled: the connection is closing
                batch.fail(ConnectionLost("the queue's connection closed with the job sent"))
            self._close_batches(RuntimeError(f"queue {self.queue!r} closed"))

    def _close_batches(self, error: BaseException) -> None:
        while self._batches:
            self._batches.popleft().fail(error)

    async def _send(self, batch: _Batch) -> None:
        places = batch.places()
        if not places:
            return
        jobs = [batch.jobs[i] for i in places]
        try:
            answers = await self._call(jobs)
        except DuplicateJob:
            if len(places) == 1:
                batch.callers.answer(places[0], (jobs[0].id, True))
            else:
                await self._one_by_one(batch, places)  # the refused call wrote nothing
            return
        except Exception as exc:
            batch.fail(exc, places)
            return
        for i, job, answer in zip(places, jobs, answers, strict=True):
            batch.callers.answer(i, _sent(job, answer))

    async def _call(self, jobs: list[GatedJob]) -> list[Answer]:
        self.calls += 1
        self.in_flight = len(jobs)
        try:
            return await evaluate(self.conn, enqueue_gated_call(self.queue, jobs))
        finally:
            self.in_flight = 0

    async def _one_by_one(self, batch: _Batch, places: Sequence[int]) -> None:
        """A batch refused by ``EMQDUP``, sent again one job per call (its callers' own
        answers: a written job, a deduplicated one, or the existing job of its id). A
        caller cancelled meanwhile is not sent again: the refused call wrote nothing."""
        for i in places:
            if batch.callers.gone(i):
                continue
            job = batch.jobs[i]
            try:
                (answer,) = await self._call([job])
            except DuplicateJob:
                batch.callers.answer(i, (job.id, True))
            except Exception as exc:
                batch.callers.fail(i, exc)
            else:
                batch.callers.answer(i, _sent(job, answer))


def _copy(error: BaseException) -> BaseException:
    try:
        twin = copy.copy(error)
    except Exception:
        return error
    return twin.with_traceback(None)
