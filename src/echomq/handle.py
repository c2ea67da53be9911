"""A job by id: wait for its result, cancel it, read its row (``TaskHandle``).

Rule 1: ``result()`` waits through the queue's one reader of its completions stream
(``echomq.results``; asyncio: the loop's, ``_client/aio_results.py``; blocking: an
``XREAD`` of its own): it reads the row first, then the stream from where the row was
read, so it cannot miss the outcome (docs/results.md).
Rule 2: a handle is typed by its task's return type: ``await handle.result()`` of a
``Task[..., int]`` is an ``int`` to a type checker (the codec decides what comes back at
run time: JSON answers a list for a tuple).
"""

from __future__ import annotations

import asyncio
import math
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

import attrs
import trio

from . import jobs
from ._model.job import JobInfo
from ._model.options import seconds
from ._scripts.keyspace import Keyspace
from .admin.discovery import queue_exists
from .cancel import CancelOutcome
from .cancel import request as cancel_request
from .errors import JobCancelled, JobExpired, JobFailed, JobGone
from .results import FinishState, Outcome

if TYPE_CHECKING:
    from .queue import Queue

__all__ = ["TaskHandle"]

R = TypeVar("R")


@attrs.define(eq=False)
class TaskHandle(Generic[R]):
    """A job by id: wait for its result, cancel it, read its row.

    ``deduplicated`` is True when ``apply(job_id=...)`` found the job already there, or
    ``apply(dedup=...)`` found its dedup key held: the handle is then the first job's.
    """

    id: str
    queue: Queue
    task: str | None = None
    deduplicated: bool = False
    _removed_reason: str | None = attrs.field(default=None, init=False)
    _removed: bool = attrs.field(default=False, init=False)

    async def info(self) -> JobInfo | None:
        """The job's row, or None when there is none."""
        return await jobs.get_job(self.queue.connection, self.queue.name, self.id)

    async def cancel(
        self, reason: str | None = None, *, grace: float | None = None
    ) -> CancelOutcome:
        """Remove the job if unclaimed, or signal its worker if active.

        ``grace`` (seconds): if the job has not stopped when it runs out, its attempt is
        fenced (settled cancelled; whatever it does later cannot commit) and its worker
        stops it hard (a process task's child is killed, a thread task abandoned).
        ``grace=0`` fences it now. ``None``: cooperative only (docs/runtime.md).

        Raises:
            InvalidArgument: a negative or non-finite grace (before any I/O).
            JobGone: no row. NotCancellable: the job already finished.
        """
        outcome = await cancel_request(
            self.queue.connection, self.queue.name, self.id, reason, grace=grace
        )
        return self._cancelled(outcome, reason)

    async def result(self, timeout: float | None = None) -> R:  # noqa: ASYNC109 - Celery's spelling
        """Wait for the job to finish and answer its return value.

        Reads the job's row, then (while it runs) the queue's completions stream from
        where the row was read: the queue's one stream reader hands the entry over, so
        nothing polls, and a call made late, or across a Redis reconnect, still finds the
        outcome while the job's row is kept (its retention, docs/results.md).

        Raises:
            JobFailed: the job is dead (``error`` is its last error text).
            JobCancelled: the job was cancelled (``reason``).
            JobExpired: the job's deadline passed before it started (it never ran).
            JobGone: the job has no row: it finished longer ago than its retention
                (``keep_result``, 24 h by default), the count guard deleted it, or it was
                removed; or the queue's meta hash is missing too, and the message says
                so: Redis lost the queue's data (or the queue was obliterated).
            trio.TooSlowError: ``timeout`` seconds passed first.
        """
        limit = math.inf if timeout is None else seconds("timeout", timeout)
        queue = self.queue
        with trio.fail_after(limit):
            feed = await queue.result_feed()
            outcome = await feed.wait(queue.connection, self.id)
        lost = outcome is None and not await queue_exists(queue.connection, queue.name)
        return self._value(outcome, queue_lost=lost)

    # -- asyncio twins (echomq.asyncio) ---------------------------------------------------

    async def ainfo(self) -> JobInfo | None:
        """The asyncio twin of :meth:`info`."""
        return await jobs.get_job(self.queue.asyncio_client().connection, self.queue.name, self.id)

    async def acancel(
        self, reason: str | None = None, *, grace: float | None = None
    ) -> CancelOutcome:
        """The asyncio twin of :meth:`cancel`."""
        conn = self.queue.asyncio_client().connection
        outcome = await cancel_request(conn, self.queue.name, self.id, reason, grace=grace)
        return self._cancelled(outcome, reason)

    async def aresult(self, timeout: float | None = None) -> R:  # noqa: ASYNC109 - Celery's spelling
        """The asyncio twin of :meth:`result`: the row, then the completions stream from
        where the row was read, through this loop's one stream reader of the queue (the
        same rules as ``echomq.results.ResultFeed``): nothing polls, nothing is missed.

        Raises:
            JobFailed, JobCancelled, JobGone: as :meth:`result`.
            TimeoutError: ``timeout`` seconds passed first (the builtin).
        """
        limit = None if timeout is None else seconds("timeout", timeout)
        client = self.queue.asyncio_client()
        async with asyncio.timeout(limit):
            outcome = await client.results.wait(client.connection, self.id)
        meta = Keyspace(self.queue.name).meta
        lost = outcome is None and not await client.connection.execute("EXISTS", meta)
        return self._value(outcome, queue_lost=lost)

    # -- blocking twins (echomq.sync) ------------------------------------------------------

    def info_sync(self) -> JobInfo | None:
        """The blocking twin of :meth:`info`."""
        return self.queue.sync_connection().get_job(self.queue.name, self.id)

    def cancel_sync(
        self, reason: str | None = None, *, grace: float | None = None
    ) -> CancelOutcome:
        """The blocking twin of :meth:`cancel`."""
        sync = self.queue.sync_connection()
        outcome = sync.cancel(self.queue.name, self.id, reason, grace=grace)
        return self._cancelled(outcome, reason)

    def result_sync(self, timeout: float | None = None) -> R:
        """The blocking twin of :meth:`result` (``echomq.sync``: no ``queue.open()``
        needed); it waits with an ``XREAD`` of its own.

        Raises:
            JobFailed, JobCancelled, JobGone: as :meth:`result`.
            TimeoutError: ``timeout`` seconds passed first (the builtin).
        """
        limit = None if timeout is None else seconds("timeout", timeout)
        sync = self.queue.sync_connection()
        outcome = sync.wait_outcome(self.queue.name, self.id, limit)
        lost = outcome is None and not sync.run(queue_exists, self.queue.name)
        return self._value(outcome, queue_lost=lost)

    def _cancelled(self, outcome: CancelOutcome, reason: str | None) -> CancelOutcome:
        if outcome is CancelOutcome.REMOVED:
            self._removed, self._removed_reason = True, reason
        return outcome

    def _value(self, outcome: Outcome | None, *, queue_lost: bool = False) -> R:
        if outcome is None:
            if self._removed:
                raise JobCancelled(self._removed_reason, job_id=self.id)
            if queue_lost:
                raise JobGone(
                    f"job {self.id} has no row, and its queue {self.queue.name!r} has no meta "
                    "hash either: Redis lost the queue's data (a restart without persistence, "
                    "a failover to an empty replica, a FLUSHALL), or the queue was "
                    "obliterated; not its retention"
                )
            raise JobGone(
                f"job {self.id} has no row: it finished longer ago than its retention "
                "(keep_result, 24 h unless the task or the queue says otherwise), the "
                "queue's count guard deleted it early (admin.stats: capped), or it was "
                "removed"
            )
        if outcome.state is FinishState.DEAD:
            raise JobFailed(self.id, outcome.error)
        if outcome.state is FinishState.CANCELLED:
            raise JobCancelled(outcome.reason or None, job_id=self.id)
        if outcome.state is FinishState.EXPIRED:
            raise JobExpired(self.id)
        if not outcome.result:
            return cast(R, None)
        value: Any = self.queue.codec.decode_result(outcome.result)
        task = self.queue.tasks.get(self.task) if self.task is not None else None
        if task is not None:  # a typed task's annotated model (task.py rule 4)
            value = task.load_result(value)
        return cast(R, value)
