"""Values the verbs take and answer: a job to enqueue, a claimed job, a job's row."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, NamedTuple

import attrs

from ..errors import InvalidArgument
from .states import JobState

__all__ = [
    "DEDUP_MODES",
    "Claimed",
    "DedupMode",
    "Enqueued",
    "JobInfo",
    "NewJob",
    "Sweep",
    "check_dedup_mode",
]


DedupMode = Literal["throttle", "until_finished", "debounce"]
DEDUP_MODES: tuple[DedupMode, ...] = ("throttle", "until_finished", "debounce")


def check_dedup_mode(mode: object) -> DedupMode:
    """``mode`` (None: ``"throttle"``) when it is one of :data:`DEDUP_MODES`.

    Raises:
        InvalidArgument: any other value.
    """
    if mode is None:
        return "throttle"
    for known in DEDUP_MODES:
        if mode == known:
            return known
    raise InvalidArgument(f"dedup_mode is one of {', '.join(DEDUP_MODES)}, not {mode!r}")


# no slots: a frozen class with a __dict__ gets an __init__ that fills the dict directly,
# a third quicker than 13 slot writes through object.__setattr__ (one per job of a bulk)
@attrs.frozen(kw_only=True, slots=False)
class NewJob:
    """One job for ``jobs.enqueue_many``: its payload and the enqueue's options as the
    verbs take them (integer milliseconds; the options are gated when the call is built).

    ``EnqueueOptions.new_job`` (``_model/options.py``) builds one from the API's options.
    ``task`` is the task's name (the app sets it; the completions entry carries it);
    ``keep_result_ms`` / ``keep_dead_ms`` the job's own retention once finished (None:
    the queue's, docs/results.md).
    """

    payload: bytes | str
    job_id: str | None = None
    delay_ms: int = 0
    priority: int = 0
    max_attempts: int = 1
    task: str | None = None
    keep_result_ms: int | None = None
    keep_dead_ms: int | None = None
    dedup: str | None = None  # a dedup key: held for ``dedup_ms`` by the job that takes it
    dedup_ms: int = 0  # 0: no window (mode until_finished only)
    dedup_mode: DedupMode = "throttle"
    group: str | None = None  # the group's lane (docs/lanes.md); None: ungrouped
    group_concurrency: int | None = None  # the group's limit, set if it has none yet
    # the job's headers: string metadata as a JSON object (before_enqueue hooks, the
    # trace context's carrier), carried in its row to the worker's Job.headers
    headers: str | None = None
    # the job's deadline (docs/runtime.md "Expiry"): not started by then, it is never run;
    # ``expires_ms`` after the enqueue (server clock) or at ``expires_at_ms`` (epoch ms)
    expires_ms: int | None = None
    expires_at_ms: int | None = None


@attrs.frozen(kw_only=True)
class Enqueued:
    """One job of an enqueue: its id, and whether it was deduplicated (``id`` is then the
    job that holds its dedup key, and nothing was written for this one)."""

    id: str
    deduplicated: bool = False


# a named tuple, filled by position: a claim's reply makes up to 250 of them per call
# (``jobs.lifecycle._claimed``), and a frozen attrs class costs twice as much to build
class Claimed(NamedTuple):
    """A job this caller now holds: ``token`` (the row's ``token``) fences every later move.

    ``headers``: the row's ``headers`` field (a JSON object of strings), None when absent.
    ``waited_ms``: server milliseconds from the job's due time (its ``run_at``: a delayed
    job, a retry; else its ``created_at``) to the claim; None when the row has neither.
    """

    id: str
    payload: bytes
    token: int
    failures: int = 0
    headers: bytes | None = None
    waited_ms: int | None = None


@attrs.frozen(kw_only=True)
class Sweep:
    """What one stalled sweep did: ids returned to pending, ids dead-lettered."""

    recovered: list[str]
    dead: list[str]


def _int(value: bytes | None, default: int = 0) -> int:
    return int(value) if value is not None else default


def _opt_int(value: bytes | None) -> int | None:
    return int(value) if value is not None else None


def _str(value: bytes | None) -> str | None:
    return value.decode("utf-8", "replace") if value is not None else None


@attrs.frozen(kw_only=True)
class JobInfo:
    """A job's row as stored. Times are server-clock milliseconds since the epoch.

    ``token`` is the fencing token: the row's ``token`` field, grown by one at every
    claim.
    ``failures`` counts handler failures against ``max_attempts``. A cancel whose grace
    ran out bumps the token too (the fence: the attempt that did not stop is stale).
    """

    id: str
    state: JobState
    payload: bytes
    token: int
    failures: int
    stalled: int
    max_attempts: int
    priority: int
    last_error: str | None
    progress: str | None
    result: bytes | None
    lease_epoch: str | None
    created_at: int | None
    claimed_at: int | None
    finished_at: int | None
    run_at: int | None
    dedup: str | None = None  # the dedup key the job took (docs/repeat.md)
    repeat: str | None = None  # the repeatable whose run this job is
    # the worker that claimed it last (its heartbeat record: admin.list_workers, explain)
    worker: str | None = None
    # a cancel request (server ms) and, with a grace, when it is fenced; when it was fenced
    cancel_requested_at: int | None = None
    cancel_deadline: int | None = None
    cancel_fenced_at: int | None = None
    cancel_reason: str | None = None  # the cancel's reason ('' when none was given)
    group: str | None = None
    # its deadline (server ms): not started by then, the claim drops it into ``expired``
    expires_at: int | None = None

    @property
    def cancelled(self) -> bool:
        """True when the job ended cancelled (its state ``cancelled``)."""
        return self.state is JobState.CANCELLED

    @classmethod
    def from_row(cls, job_id: str, row: Mapping[bytes, bytes]) -> JobInfo:
        return cls(
            id=job_id,
            state=JobState(row[b"state"].decode()),
            payload=row.get(b"payload", b""),
            token=_int(row.get(b"token")),
            failures=_int(row.get(b"failures")),
            stalled=_int(row.get(b"stalled")),
            max_attempts=_int(row.get(b"max_attempts"), 1),
            priority=_int(row.get(b"priority")),
            last_error=_str(row.get(b"last_error")),
            progress=_str(row.get(b"progress")),
            result=row.get(b"result"),
            lease_epoch=_str(row.get(b"lease_epoch")),
            created_at=_opt_int(row.get(b"created_at")),
            claimed_at=_opt_int(row.get(b"claimed_at")),
            finished_at=_opt_int(row.get(b"finished_at")),
            run_at=_opt_int(row.get(b"run_at")),
            dedup=_str(row.get(b"dedup")),
            repeat=_str(row.get(b"repeat")),
            worker=_str(row.get(b"worker")),
            cancel_requested_at=_opt_int(row.get(b"cancel_requested")),
            cancel_deadline=_opt_int(row.get(b"cancel_deadline")),
            cancel_fenced_at=_opt_int(row.get(b"cancel_fenced")),
            cancel_reason=_str(row.get(b"cancel_reason")),
            group=_str(row.get(b"group")),
            expires_at=_opt_int(row.get(b"expires_at")),
        )
