"""The job verbs (DESIGN.md section 4): one async function per transition.

Every verb takes ``conn, queue`` first, gates its arguments before any I/O, runs one
script, and answers a value or raises a typed error from :mod:`echomq.errors`; a refusal
changes nothing on the server. The lifecycle verbs live in ``lifecycle.py`` (enqueue, claim,
complete, fail, extend, release, reap, get_job), the per-job verbs in ``rows.py``, the wake
list in ``wake.py``.
"""

from __future__ import annotations

from .._model.job import Claimed, Enqueued, JobInfo
from .._scripts.replies import CompleteResult, ExtendResult
from .lifecycle import (
    ClaimBatch,
    ExtendAnswers,
    FailOutcome,
    NewJob,
    claim,
    claim_batch,
    complete,
    complete_many,
    enqueue,
    enqueue_batch,
    enqueue_many,
    extend_lock,
    extend_locks,
    fail,
    get_job,
    new_id,
    rate_limited,
    reap,
    reap_counted,
    release,
)
from .rows import (
    Explanation,
    LaneFacts,
    OpenChild,
    RateWindow,
    add_log,
    explain,
    get_job_logs,
    remove_job,
    reprocess_job,
    update_data,
    update_progress,
)

__all__ = [
    "ClaimBatch",
    "claim_batch",
    "Claimed",
    "Enqueued",
    "CompleteResult",
    "ExtendAnswers",
    "ExtendResult",
    "FailOutcome",
    "JobInfo",
    "LaneFacts",
    "OpenChild",
    "NewJob",
    "RateWindow",
    "claim",
    "complete",
    "complete_many",
    "enqueue",
    "enqueue_batch",
    "enqueue_many",
    "extend_lock",
    "extend_locks",
    "fail",
    "get_job",
    "new_id",
    "rate_limited",
    "reap",
    "reap_counted",
    "release",
    "update_data",
    "update_progress",
    "add_log",
    "get_job_logs",
    "remove_job",
    "reprocess_job",
    "Explanation",
    "explain",
]
