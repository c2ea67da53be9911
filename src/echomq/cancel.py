"""Cooperative cancellation (seed 000): the worker-side token and the request verb.

Rule 1: a :class:`CancelToken` touches no key, no script and no set. It is a flag a
handler may read (``poll``/``check``); the worker also bridges it to the job's
``trio.CancelScope``, so the handler stops at its next checkpoint (except inside
``job.shielded()``). A handler that never awaits completes normally.
Rule 2: :func:`request` reaches a job by queue and id from anywhere: one read of the
row's state, then pending/scheduled jobs are removed and active ones are signalled with
``{"event": "cancel", "job": id, "reason": reason}`` on the events channel, at most once
(a publish that no worker hears is lost, as the seed says).
"""

from __future__ import annotations

import enum
import json

import attrs

from . import jobs
from ._model.states import JobState
from ._redis.connection import Connection
from ._redis.keyspace import Keyspace
from ._redis.scripts import is_sharded
from .errors import JobCancelled, JobGone, NotCancellable

__all__ = ["CancelOutcome", "CancelToken", "request"]


class CancelOutcome(enum.StrEnum):
    """What :func:`request` did."""

    REMOVED = "removed"
    SIGNALLED = "signalled"


@attrs.define(eq=False)
class CancelToken:
    """One job's cancellation flag. The worker mints one per claim."""

    _cancelled: bool = attrs.field(default=False, init=False)
    _reason: str | None = attrs.field(default=None, init=False)

    def cancel(self, reason: str | None = None) -> None:
        """Mark the token cancelled; the first reason given wins."""
        if not self._cancelled:
            self._cancelled = True
            self._reason = reason

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    @property
    def reason(self) -> str | None:
        return self._reason

    def poll(self) -> bool:
        """True once a cancellation was asked (non-blocking, no I/O)."""
        return self._cancelled

    def check(self) -> None:
        """Raise :class:`~echomq.errors.JobCancelled` if a cancellation was asked.

        A handler that raises it (from here or itself) completes as cancelled.
        """
        if self._cancelled:
            raise JobCancelled(self._reason)


def cancel_event(job_id: str, reason: str | None) -> str:
    """The JSON a cancel request publishes."""
    return json.dumps({"event": "cancel", "job": job_id, "reason": reason}, separators=(",", ":"))


async def request(
    conn: Connection, queue: str, job_id: str, reason: str | None = None
) -> CancelOutcome:
    """Cancel a job by id: remove it if unclaimed, signal its worker if active.

    Raises:
        InvalidKey: a bad queue name or job id (before any I/O).
        JobGone: no row. NotCancellable: the job is completed or dead.
        JobLocked: a pending job under an operator lock cannot be removed.
    """
    ks = Keyspace(queue)
    row = ks.job(job_id)
    if reason is not None and not isinstance(reason, str):
        reason = str(reason)
    state = await conn.execute("HGET", row, "state")
    if state is None:
        raise JobGone(f"cancel {job_id}")
    state = JobState(state.decode())
    if state in (JobState.PENDING, JobState.SCHEDULED):
        try:
            await jobs.remove_job(conn, queue, job_id)
        except JobGone:
            # removed or claimed-and-finished between the read and the removal
            return await request(conn, queue, job_id, reason)
        return CancelOutcome.REMOVED
    if state is JobState.ACTIVE:
        publish = "SPUBLISH" if is_sharded(conn) else "PUBLISH"  # a cluster: its shard
        await conn.execute(publish, ks.events, cancel_event(job_id, reason))
        return CancelOutcome.SIGNALLED
    raise NotCancellable(f"cancel {job_id}: the job is {state}")
