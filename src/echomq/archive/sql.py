"""The SQL both stores share: the columns, a job as a row and back, the history filter.

The table (``emq_finished_jobs``; docs/results.md draws it): ``seq`` (a surrogate key,
the tie-break of "newest first"), ``queue``, ``job_id``, ``attempts``, ``created_at``
(0 when the entry had none: it is part of the unique key), ``task``, ``state``, ``result``,
``error``, ``reason``, ``failures``, ``claimed_at``, ``finished_at``, ``stream_id``,
``archived_at`` and ``extra`` (a JSON object of the entry's unknown fields, or NULL).
The column ``attempts`` holds the job's fencing token (``FinishedJob.token``): it keeps
its name so that an archive made by an earlier echomq needs no migration.
Unique on ``(queue, job_id, attempts, created_at)``; indexed for the history queries:
``(queue, finished_at, seq)``, ``(queue, state, finished_at, seq)`` and
``(queue, task, finished_at, seq)``. ``state`` is checked against ``STATE_CHECK``: every
:class:`FinishState` (``expired`` from schema version 2 on: a store of version 1 is
migrated by the first writer that opens it).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .._model.completion import FinishedJob, FinishState
from .store import META_TABLE, HistoryQuery

__all__ = [
    "COLUMNS",
    "INDEXES",
    "META_CREATE",
    "STATE_CHECK",
    "history_sql",
    "job_row",
    "row_job",
]

COLUMNS = (
    "queue", "job_id", "attempts", "created_at", "task", "state", "result", "error",
    "reason", "failures", "claimed_at", "finished_at", "stream_id", "archived_at", "extra",
)  # fmt: skip

#: the state column's CHECK: every way a job finishes
STATE_CHECK = "state IN (" + ", ".join(f"'{s.value}'" for s in FinishState) + ")"

META_CREATE = (
    f"CREATE TABLE IF NOT EXISTS {META_TABLE} (name TEXT PRIMARY KEY, value TEXT NOT NULL)"
)

INDEXES = {
    "emq_finished_jobs_recent": "(queue, finished_at, seq)",
    "emq_finished_jobs_state": "(queue, state, finished_at, seq)",
    "emq_finished_jobs_task": "(queue, task, finished_at, seq)",
}


def job_row(job: FinishedJob, archived_at: int) -> tuple[Any, ...]:
    """The values of ``COLUMNS`` for ``job``."""
    return (
        job.queue,
        job.id,
        job.token,
        job.created_at if job.created_at is not None else 0,
        job.task,
        str(job.state),
        job.result,
        job.error,
        job.reason,
        job.failures,
        job.claimed_at,
        job.finished_at,
        job.stream_id,
        archived_at,
        json.dumps(dict(job.extra), sort_keys=True) if job.extra else None,
    )


def row_job(row: Sequence[Any]) -> tuple[int, FinishedJob]:
    """``(seq, job)`` from a row of ``seq, *COLUMNS``."""
    (seq, queue, job_id, attempts, created_at, task, state, result, error, reason, failures,
     claimed_at, finished_at, stream_id, archived_at, extra) = row  # fmt: skip
    if isinstance(extra, str):
        extra = json.loads(extra)
    return int(seq), FinishedJob(
        queue=queue,
        id=job_id,
        token=int(attempts),
        state=FinishState(state),
        finished_at=int(finished_at),
        stream_id=stream_id,
        task=task,
        result=bytes(result) if result is not None else None,
        error=error,
        reason=reason,
        failures=failures,
        created_at=int(created_at) or None,
        claimed_at=claimed_at,
        extra={str(k): str(v) for k, v in (extra or {}).items()},
        archived_at=int(archived_at),
    )


def history_sql(table: str, query: HistoryQuery, mark: str) -> tuple[str, list[Any]]:
    """The SELECT for ``query`` (``mark`` is the driver's placeholder: ``?`` or ``%s``)."""
    where = ["queue = " + mark]
    params: list[Any] = [query.queue]
    for column, value in (
        ("task", query.task),
        ("state", str(query.state) if query.state is not None else None),
        ("job_id", query.job_id),
    ):
        if value is not None:
            where.append(f"{column} = {mark}")
            params.append(value)
    if query.since_ms is not None:
        where.append(f"finished_at >= {mark}")
        params.append(query.since_ms)
    if query.until_ms is not None:
        where.append(f"finished_at < {mark}")
        params.append(query.until_ms)
    if query.before is not None:
        finished_at, seq = query.before
        where.append(f"(finished_at < {mark} OR (finished_at = {mark} AND seq < {mark}))")
        params += [finished_at, finished_at, seq]
    sql = (
        f"SELECT seq, {', '.join(COLUMNS)} FROM {table} WHERE {' AND '.join(where)} "
        f"ORDER BY finished_at DESC, seq DESC LIMIT {mark}"
    )
    return sql, [*params, query.limit]
