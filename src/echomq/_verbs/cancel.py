"""The cancel request verb (docs/runtime.md); ``echomq.cancel`` is its public face (with the
token, ``_model/cancel.py``).

Rule 1: :func:`request` reaches a job by queue and id from anywhere, in one script
(``cancel.lua``): pending/scheduled jobs are removed; active ones are signalled with
``{"event": "cancel", "job": id, "reason": reason}`` on the events channel AND a cancel
flag on the row (``cancel_requested``, ``cancel_reason``). The event is at most once (a
publish no worker hears is lost, as the seed says); the flag is not: the worker's lease
keeper sees it at its next checkpoint (``extend_locks`` answers ``cancel``).
Rule 2: the state is read and acted on in the same script, so a claim can never slip
between them: a job answered ``removed`` was never claimed, and a job a worker claimed
first is ``signalled``.
"""

from __future__ import annotations

import enum
from typing import Any

from .._redis.keyspace import Keyspace
from .._redis.replies import check_status, text
from .._redis.scripts import Executor, ScriptCall, evaluate, script_call
from ..errors import ScriptError

__all__ = ["CancelOutcome", "request", "request_call"]


class CancelOutcome(enum.StrEnum):
    """What :func:`request` did."""

    REMOVED = "removed"
    SIGNALLED = "signalled"


def request_call(queue: str, job_id: str, reason: str | None = None) -> ScriptCall[CancelOutcome]:
    """The ``cancel`` script call for :func:`request` (no I/O)."""
    ks = Keyspace(queue)
    keys = [ks.job(job_id), ks.lock(job_id), ks.logs(job_id), ks.pending, ks.schedule]
    if reason is not None and not isinstance(reason, str):
        reason = str(reason)  # as before: any value reads as its text
    argv = [job_id, ks.base, "0" if reason is None else "1", reason or ""]

    def read(reply: Any) -> CancelOutcome:
        if isinstance(reply, int):
            check_status(reply, f"cancel {job_id}")
        try:
            return CancelOutcome(text(reply))
        except ValueError:
            raise ScriptError(f"cancel {job_id}: unexpected reply {reply!r}") from None

    return script_call("cancel", keys, argv, read)


async def request(
    conn: Executor, queue: str, job_id: str, reason: str | None = None
) -> CancelOutcome:
    """Cancel a job by id, atomically: remove it if unclaimed, signal its worker if active.

    ``signalled`` means the job is active and now carries the cancel flag: its worker stops
    it at its next checkpoint (the event, or the lease keeper's next renewal) and it
    completes as ``cancelled:<reason>``. Asking again changes nothing (the first reason
    stands) but publishes the event again.

    Raises:
        InvalidKey: a bad queue name or job id (before any I/O).
        JobGone: no row. NotCancellable: the job is completed or dead.
        JobLocked: a waiting job under an operator lock cannot be removed.
        Nothing is written on any refusal.
    """
    return await evaluate(conn, request_call(queue, job_id, reason))
