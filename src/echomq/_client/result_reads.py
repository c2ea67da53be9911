"""Reading outcomes, without I/O: the builders and readers of ``results.py``'s rules.

Shared by the trio :class:`~echomq.results.ResultFeed`, the asyncio feed
(``aio_results.py``), their waiters (``result_waiters.py``) and the blocking producer
(``echomq.sync``), which waits with its own ``XREAD``: an :class:`Outcome` read from a row
or a completions entry, a waiter's first read (:class:`Probe`), the ``XREAD`` command and
its reply.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from .._model.completion import CorruptEntry, FinishState, parse_entry
from .._model.job import JobInfo
from .._model.states import CANCELLED_PREFIX, JobState
from .._scripts.keyspace import keyspace
from .._wire.connection import Arg
from ..errors import ScriptError, ServerError
from ..jobs.lifecycle import read_job

__all__ = [
    "Outcome",
    "Probe",
    "entry_job_id",
    "entry_outcome",
    "probe_commands",
    "read_probe",
    "read_stream_entries",
    "row_outcome",
    "xread_command",
]

log = logging.getLogger("echomq.results")


@attrs.frozen(kw_only=True)
class Outcome:
    """How a job finished: ``result`` (the codec's bytes) when completed, ``error`` when
    dead, ``reason`` (may be empty) when cancelled."""

    state: FinishState
    result: bytes | None = None
    error: str | None = None
    reason: str | None = None


@attrs.frozen(kw_only=True)
class Probe:
    """A waiter's first read: the stream's last id (read the stream after it) and the row."""

    after: str
    info: JobInfo | None


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def row_outcome(info: JobInfo) -> Outcome | None:
    """The outcome a row records, or None while the job has not finished."""
    if info.state is JobState.DEAD:
        return Outcome(state=FinishState.DEAD, error=info.last_error)
    if info.state is not JobState.COMPLETED:
        return None
    result = info.result or b""
    if result.startswith(CANCELLED_PREFIX.encode()):
        reason = result[len(CANCELLED_PREFIX) :].decode("utf-8", "replace")
        return Outcome(state=FinishState.CANCELLED, reason=reason)
    return Outcome(state=FinishState.COMPLETED, result=result)


def _flat(fields: Any) -> list[bytes]:
    """An entry's fields as a flat list (redis-py answers a dict)."""
    if isinstance(fields, Mapping):
        return [x for pair in fields.items() for x in pair]
    return list(fields)


def entry_job_id(fields: Sequence[bytes]) -> bytes | None:
    """The job id of an entry, cheaply: the scripts write ``id`` first."""
    if len(fields) >= 2 and fields[0] == b"id":
        return fields[1]
    for i in range(0, len(fields) - 1, 2):
        if fields[i] == b"id":
            return fields[i + 1]
    return None


def entry_outcome(queue: str, stream_id: str, fields: Sequence[bytes]) -> Outcome | None:
    """The outcome an entry records; None for an entry that cannot be read (logged)."""
    try:
        job = parse_entry(queue, stream_id, fields)
    except CorruptEntry as exc:
        log.warning("completions entry %s of %s skipped: %s", stream_id, queue, exc)
        return None
    return Outcome(state=job.state, result=job.result, error=job.error, reason=job.reason)


def probe_commands(queue: str, job_id: str) -> list[tuple[Arg, ...]]:
    """The stream's last entry and the job's row, in this order (one pipeline)."""
    ks = keyspace(queue)
    return [("XREVRANGE", ks.completions, "+", "-", "COUNT", 1), ("HGETALL", ks.job(job_id))]


def read_probe(job_id: str, replies: Sequence[Any]) -> Probe:
    """Read :func:`probe_commands`' replies.

    Raises:
        ServerError: a reply was an error. ScriptError: an unexpected shape.
    """
    for reply in replies:
        if isinstance(reply, ServerError):
            raise reply
    last, row = replies
    if not isinstance(last, list):
        raise ScriptError(f"result {job_id}: unexpected XREVRANGE reply {last!r:.200}")
    after = _s(last[0][0]) if last else "0-0"
    return Probe(after=after, info=read_job(job_id, row))


def xread_command(queue: str, after: str, *, count: int, block_ms: int | None) -> tuple[Arg, ...]:
    """``XREAD`` of the completions stream after ``after`` (blocking ``block_ms``)."""
    head: tuple[Arg, ...] = ("XREAD", "COUNT", count)
    if block_ms is not None:
        head += ("BLOCK", block_ms)
    return (*head, "STREAMS", keyspace(queue).completions, after)


def read_stream_entries(reply: Any, *, xread: bool = True) -> list[tuple[str, list[bytes]]]:
    """An ``XREAD`` reply of one stream (``xread``) or an ``XRANGE`` one, as ``(id, flat
    fields)`` pairs; from the trio wire or from redis-py (whose fields are a dict).

    Raises:
        ScriptError: an unexpected shape.
    """
    if not reply:  # None (the trio wire) or [] (redis-py): nothing came
        return []
    try:
        if xread:
            if isinstance(reply, Mapping):  # redis-py over RESP3: {key: [entries]}
                reply = next(iter(reply.values()))
            else:
                reply = reply[0][1]
        return [(_s(item[0]), _flat(item[1]) if item[1] is not None else []) for item in reply]
    except (TypeError, IndexError, KeyError, StopIteration):
        raise ScriptError(f"unexpected stream reply {reply!r:.200}") from None
