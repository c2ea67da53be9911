"""The per-job verbs (seed 004): reach into one row.

``update_data``, ``update_progress``, ``add_log``, ``get_job_logs``, ``remove_job``,
``reprocess_job`` and ``explain``. Each gates its arguments before any I/O, runs one
script, and answers a value or raises a typed error; a refusal changes nothing. A missing
row is :class:`~echomq.errors.JobGone` for every one of them. The ``*_call`` builders do no
I/O, so ``echomq.sync`` can run them on redis-py.
"""

from __future__ import annotations

from typing import Any

from .._redis import validate as v
from .._redis.connection import Connection
from .._redis.keyspace import Keyspace
from .._redis.replies import check, text
from .._redis.scripts import ScriptCall, call, evaluate
from ..errors import InvalidArgument, ScriptError

__all__ = [
    "add_log",
    "get_job_logs",
    "remove_job",
    "reprocess_job",
    "update_data",
    "update_progress",
]

MAX_LOG_LINE = 64 * 1024  # bytes; a log line is a line, not a blob


# -- builders (no I/O) ---------------------------------------------------------------------


def _status(what: str) -> Any:
    def read(reply: Any) -> None:
        check(reply, what)

    return read


def progress_text(progress: object) -> str:
    """The stored form of a progress value: a str as is, a number as its decimal text."""
    if isinstance(progress, bool) or not isinstance(progress, str | int | float):
        raise InvalidArgument(f"progress must be a str, int or float, not {progress!r}")
    if isinstance(progress, float) and progress != progress:  # NaN
        raise InvalidArgument("progress must not be NaN")
    return progress if isinstance(progress, str) else str(progress)


def update_data_call(queue: str, job_id: str, payload: bytes | str) -> ScriptCall[None]:
    ks = Keyspace(queue)
    keys = [ks.job(job_id)]
    return call("update_data", keys, [v.payload_bytes(payload)], _status(f"update_data {job_id}"))


def update_progress_call(queue: str, job_id: str, progress: str | int | float) -> ScriptCall[None]:
    ks = Keyspace(queue)
    keys = [ks.job(job_id)]
    argv = [progress_text(progress), job_id, ks.base]
    return call("update_progress", keys, argv, _status(f"update_progress {job_id}"))


def add_log_call(queue: str, job_id: str, line: str, *, keep: int | None = None) -> ScriptCall[int]:
    ks = Keyspace(queue)
    keys = [ks.job(job_id), ks.logs(job_id)]
    if not isinstance(line, str):
        raise InvalidArgument(f"a log line must be a str, not {type(line).__name__}")
    data = line.encode()
    if len(data) > MAX_LOG_LINE:
        raise InvalidArgument(f"a log line is at most {MAX_LOG_LINE} bytes, not {len(data)}")
    keep_n = 0 if keep is None else v.positive_int("keep", keep)

    def read(reply: Any) -> int:
        if isinstance(reply, int) and reply >= 0:
            return reply
        check(reply, f"add_log {job_id}")
        raise ScriptError(f"add_log {job_id}: unexpected reply {reply!r}")

    return call("add_log", keys, [data, keep_n], read)


def get_job_logs_call(queue: str, job_id: str) -> ScriptCall[list[str]]:
    ks = Keyspace(queue)

    def read(reply: Any) -> list[str]:
        if isinstance(reply, list):
            return [text(line) for line in reply]
        check(reply, f"get_job_logs {job_id}")
        raise ScriptError(f"get_job_logs {job_id}: unexpected reply {reply!r}")

    return call("get_job_logs", [ks.job(job_id), ks.logs(job_id)], [], read)


def remove_job_call(queue: str, job_id: str) -> ScriptCall[None]:
    ks = Keyspace(queue)
    keys = [
        ks.job(job_id),
        ks.lock(job_id),
        ks.logs(job_id),
        ks.pending,
        ks.schedule,
        ks.active,
        ks.dead,
        ks.completed,
    ]
    return call("remove_job", keys, [job_id, ks.base], _status(f"remove_job {job_id}"))


def reprocess_job_call(queue: str, job_id: str) -> ScriptCall[None]:
    ks = Keyspace(queue)
    keys = [ks.job(job_id), ks.dead, ks.pending, ks.wake]
    return call("reprocess_job", keys, [job_id, ks.base], _status(f"reprocess_job {job_id}"))


# -- verbs ------------------------------------------------------------------------------------


async def update_data(conn: Connection, queue: str, job_id: str, payload: bytes | str) -> None:
    """Replace the job's payload (whatever its state; a running handler keeps its copy).

    Raises:
        InvalidKey, SerializationError: before any I/O. JobGone: no row; nothing written.
    """
    await evaluate(conn, update_data_call(queue, job_id, payload))


async def update_progress(
    conn: Connection, queue: str, job_id: str, progress: str | int | float
) -> None:
    """Write the row's ``progress`` and publish ``{"event": "progress", ...}``.

    A number is stored as its decimal text; the event carries the stored text.

    Raises:
        InvalidKey, InvalidArgument: before any I/O. JobGone: no row; nothing written.
    """
    await evaluate(conn, update_progress_call(queue, job_id, progress))


async def add_log(
    conn: Connection, queue: str, job_id: str, line: str, *, keep: int | None = None
) -> int:
    """Append ``line`` to the job's logs; with ``keep``, keep only the last ``keep`` lines.

    Answers the number of lines kept.

    Raises:
        InvalidKey, InvalidArgument: before any I/O. JobGone: no row; nothing written.
    """
    return await evaluate(conn, add_log_call(queue, job_id, line, keep=keep))


async def get_job_logs(conn: Connection, queue: str, job_id: str) -> list[str]:
    """The job's log lines in append order (``[]`` when none).

    Raises:
        InvalidKey: before any I/O. JobGone: no row.
    """
    return await evaluate(conn, get_job_logs_call(queue, job_id))


async def remove_job(conn: Connection, queue: str, job_id: str) -> None:
    """Remove the job from whichever set holds it (active included), with its row and logs.

    A worker still running a removed job finds its row gone when it settles (``JobGone``).

    Raises:
        InvalidKey: before any I/O. JobGone: no row. JobLocked: the job has an operator
        lock (a ``:lock`` key or a ``lock`` field); nothing changed.
    """
    await evaluate(conn, remove_job_call(queue, job_id))


async def reprocess_job(conn: Connection, queue: str, job_id: str) -> None:
    """Move a dead job back to pending, first in its priority band, and wake a worker.

    ``last_error`` is cleared; ``attempts``, ``failures`` and ``stalled`` stay. The pause
    gate is not read: on a paused queue the job waits in pending until resume.

    Raises:
        InvalidKey: before any I/O. JobGone: no row. NotDead: not in the dead set.
    """
    await evaluate(conn, reprocess_job_call(queue, job_id))
