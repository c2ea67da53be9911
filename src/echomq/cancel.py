"""Cancellation (docs/runtime.md): the worker-side token and the request verbs.

:class:`CancelToken` is a flag a handler reads (``poll``/``check``); the worker bridges it
to the job's cancel scope. It is a plain value (``_model/cancel.py``).

Rule 1: :func:`request` reaches a job by queue and id from anywhere, in one script
(``cancel.lua``): pending/scheduled jobs are removed; active ones are signalled with
``{"event": "cancel", "job": id, "reason": reason}`` on the events channel AND a cancel
flag on the row (``cancel_requested``, ``cancel_reason``). The event is at most once (a
publish no worker hears is lost, as the seed says); the flag is not: the worker's lease
keeper sees it at its next checkpoint (``extend_locks`` answers ``cancel``).
Rule 2: the state is read and acted on in the same script, so a claim can never slip
between them: a job answered ``removed`` was never claimed, and a job a worker claimed
first is ``signalled``.
Rule 3: a ``grace`` escalates. The row gets ``cancel_deadline`` (server now + grace) and
the job an entry in ``emq:{q}:cancels``; when the deadline passes, :func:`fence_due`
(every worker runs it with its heartbeat) settles the job cancelled and bumps its token:
the attempt that did not stop can never complete, fail or extend (it answers stale).
``grace=0`` fences at once (``fenced``). Without a grace the cancel stays cooperative.
"""

from __future__ import annotations

import enum
import math
from typing import Any

from ._model.cancel import MAX_REASON, CancelToken
from ._model.text import clip, safe_str
from ._scripts import validate as v
from ._scripts.calls import Executor, ScriptCall, evaluate, script_call
from ._scripts.keyspace import Keyspace
from ._scripts.replies import check_status, text
from .errors import InvalidArgument, ScriptError

__all__ = [
    "CancelOutcome",
    "CancelToken",
    "DEFAULT_FENCE_LIMIT",
    "fence_due",
    "fence_due_call",
    "grace_ms",
    "request",
    "request_call",
]

DEFAULT_FENCE_LIMIT = 100  # due cancels fenced per call (a heartbeat runs one call)


class CancelOutcome(enum.StrEnum):
    """What :func:`request` did."""

    REMOVED = "removed"  # the job was waiting: removed with its logs
    SIGNALLED = "signalled"  # the job is active: its worker was asked to stop it
    FENCED = "fenced"  # the job was active and its grace is over: settled cancelled now


def grace_ms(grace: object) -> int:
    """A cancel's grace (float seconds, >= 0, finite) as the script's milliseconds.

    Raises:
        InvalidArgument: a negative, non-finite or non-number grace (before any I/O).
    """
    if isinstance(grace, bool) or not isinstance(grace, int | float) or not math.isfinite(grace):
        raise InvalidArgument(f"grace must be a finite number of seconds, not {grace!r}")
    if grace < 0:
        raise InvalidArgument(f"grace must be >= 0 seconds, not {grace!r}")
    if grace * 1000 > v.MAX_MS:  # (1e308 s would overflow to inf ms)
        raise InvalidArgument(f"grace must be at most {v.MAX_MS // 1000} seconds, not {grace!r}")
    return v.non_negative_int("grace", round(grace * 1000), v.MAX_MS)


def request_call(
    queue: str, job_id: str, reason: str | None = None, *, grace: float | None = None
) -> ScriptCall[CancelOutcome]:
    """The ``cancel`` script call for :func:`request` (no I/O)."""
    ks = Keyspace(queue)
    keys = [
        ks.job(job_id),
        ks.lock(job_id),
        ks.logs(job_id),
        ks.pending,
        ks.schedule,
        ks.active,
        ks.cancels,
        ks.waiting,
    ]
    if reason is not None:
        # as before, any value reads as its text; kept to what a result keeps of it
        reason = clip(reason if isinstance(reason, str) else safe_str(reason), MAX_REASON)
    window = -1 if grace is None else grace_ms(grace)
    argv = [job_id, ks.base, "0" if reason is None else "1", reason or "", window]

    def read(reply: Any) -> CancelOutcome:
        if isinstance(reply, int):
            check_status(reply, f"cancel {job_id}")
        try:
            return CancelOutcome(text(reply))
        except ValueError:
            raise ScriptError(f"cancel {job_id}: unexpected reply {reply!r}") from None

    return script_call("cancel", keys, argv, read)


def fence_due_call(queue: str, limit: int = DEFAULT_FENCE_LIMIT) -> ScriptCall[list[str]]:
    """The ``fence_cancels`` script call for :func:`fence_due` (no I/O)."""
    ks = Keyspace(queue)
    v.int_in("limit", limit, 1, v.MAX_BATCH)
    keys = [ks.cancels, ks.active, ks.pending, ks.schedule]

    def read(reply: Any) -> list[str]:
        if not isinstance(reply, list):
            raise ScriptError(f"fence_cancels: unexpected reply {reply!r}")
        return [text(x) for x in reply]

    return script_call("fence_cancels", keys, [ks.base, limit], read)


async def request(
    conn: Executor,
    queue: str,
    job_id: str,
    reason: str | None = None,
    *,
    grace: float | None = None,
) -> CancelOutcome:
    """Cancel a job by id, atomically: remove it if unclaimed, signal its worker if active.

    ``signalled`` means the job is active and now carries the cancel flag: its worker stops
    it at its next checkpoint (the event, or the lease keeper's next renewal) and it
    completes as ``cancelled:<reason>``. Asking again changes nothing (the first reason
    stands) but publishes the event again.

    ``grace`` (seconds): if the job has not stopped when it runs out, the attempt is fenced
    (settled cancelled, its token bumped: the holder can no longer complete, fail or
    extend it) and its worker stops it hard (a process task's child is terminated, a
    thread task abandoned). ``grace=0`` fences now (``fenced``). A repeat may shorten the
    grace, never lengthen it. ``None`` (the default): cooperative only, as the lifecycle
    design has it.

    Raises:
        InvalidKey: a bad queue name or job id; InvalidArgument: a negative or non-finite
            grace (both before any I/O).
        JobGone: no row. NotCancellable: the job is completed or dead.
        JobLocked: a waiting job under an operator lock cannot be removed. Nothing is
            written on any refusal.
    """
    return await evaluate(conn, request_call(queue, job_id, reason, grace=grace))


async def fence_due(conn: Executor, queue: str, *, limit: int = DEFAULT_FENCE_LIMIT) -> list[str]:
    """Fence every cancel whose grace has run out (at most ``limit`` per call); answer the
    ids fenced now. Workers run it with each heartbeat; safe to run from anywhere, any
    number of times.

    Raises:
        InvalidKey, InvalidArgument: before any I/O.
    """
    return await evaluate(conn, fence_due_call(queue, limit))
