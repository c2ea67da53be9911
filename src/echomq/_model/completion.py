"""A finished job as the completions stream carries it, and as the archive keeps it.

The stream ``emq:{q}:completions`` holds one entry per finished job (docs/results.md);
:func:`parse_entry` turns an entry's flat field list into a :class:`FinishedJob`.

Rule 1: parsing is total: a malformed entry raises :class:`CorruptEntry` (a ValueError),
nothing else, so the archive logs it and goes on.
Rule 2: required: ``id``, ``state`` (``completed`` | ``dead`` | ``cancelled`` |
``expired``) and
``token`` (the fencing token, part of the job's identity in the archive; an entry written
before the field's rename carries it as ``attempts``, read the same). Every other
known field is optional; a time or count that is present must be an integer (an empty
value counts as absent). ``finished_at`` defaults to the stream id's milliseconds: the
script that writes the entry also stamps its id from the server clock.
Rule 3: unknown fields are kept, as text, in ``extra``: a newer writer's fields survive an
older archive.
Rule 4: text is decoded as UTF-8 (undecodable bytes replaced) with NUL characters replaced
by U+FFFD, which every store accepts; ``result`` stays bytes (the codec's output).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence

import attrs

__all__ = [
    "CorruptEntry",
    "FinishState",
    "FinishedJob",
    "KNOWN_FIELDS",
    "entry_fields",
    "parse_entry",
    "stream_ms",
]

_INT64 = 2**63 - 1

KNOWN_FIELDS = frozenset(
    {
        "id", "task", "state", "result", "error", "reason", "token", "attempts", "failures",
        "created_at", "claimed_at", "finished_at",
    }
)  # fmt: skip
_KNOWN_BYTES = frozenset(name.encode() for name in KNOWN_FIELDS)


class CorruptEntry(ValueError):
    """A completions stream entry that cannot be read as a finished job; logged and skipped."""


class FinishState(enum.StrEnum):
    """How a job finished: the ``state`` field of a completions entry."""

    COMPLETED = "completed"
    DEAD = "dead"
    CANCELLED = "cancelled"
    EXPIRED = "expired"  # its deadline passed before it started (error: ``expired``)


@attrs.frozen(kw_only=True)
class FinishedJob:
    """One finished run of a job: ``(queue, id, token, created_at)`` identifies it.

    Times are server-clock milliseconds. ``result`` is set for completed jobs, ``error`` for
    dead ones (``expired`` for expired ones), ``reason`` for cancelled ones. ``stream_id``
    is the entry's id in ``emq:{q}:completions``; ``archived_at`` is set on jobs read back
    from an archive.
    """

    queue: str
    id: str
    token: int
    state: FinishState
    finished_at: int
    stream_id: str
    task: str | None = None
    result: bytes | None = None
    error: str | None = None
    reason: str | None = None
    failures: int | None = None
    created_at: int | None = None
    claimed_at: int | None = None
    extra: Mapping[str, str] = attrs.field(factory=dict)
    archived_at: int | None = None


_STATES = {state.value.encode(): state for state in FinishState}


def _text(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace")
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def _integer(name: str, raw: bytes | None) -> int | None:
    if not raw:  # absent or empty
        return None
    try:
        value = int(raw)
    except ValueError:
        raise CorruptEntry(f"{name} is not an integer: {raw[:40]!r}") from None
    if not -_INT64 <= value <= _INT64:
        raise CorruptEntry(f"{name} is out of range: {value}")
    return value


def stream_ms(stream_id: str) -> int:
    """The milliseconds part of a stream id (``1700000000000-3`` -> 1700000000000).

    Raises:
        CorruptEntry: the id is not ``<ms>-<seq>``.
    """
    ms, sep, seq = stream_id.partition("-")
    if not sep or not ms.isdigit() or not seq.isdigit():
        raise CorruptEntry(f"not a stream id: {stream_id[:60]!r}")
    return int(ms)


def parse_entry(queue: str, stream_id: str, fields: Sequence[bytes]) -> FinishedJob:
    """Read one entry (its flat ``[field, value, ...]`` list, as XREADGROUP answers it).

    Raises:
        CorruptEntry: a required field is missing, a state is unknown, a time or count is
            not an integer, or the list is not field/value pairs.
    """
    if len(fields) % 2:
        raise CorruptEntry("fields are not name/value pairs")
    # a repeated field: the last one holds, as in a hash
    values: dict[bytes, bytes] = dict(zip(fields[::2], fields[1::2], strict=True))
    try:
        return _job(queue, stream_id, values)
    except (TypeError, AttributeError):  # not bytes: the wire answers bulk strings only
        raise CorruptEntry("a field or value is not a string") from None


def _job(queue: str, stream_id: str, values: dict[bytes, bytes]) -> FinishedJob:
    get = values.get
    job_id = get(b"id")
    if not job_id:
        raise CorruptEntry("no id")
    raw_state = get(b"state")
    if raw_state is None:
        raise CorruptEntry("no state")
    state = _STATES.get(raw_state)
    if state is None:
        raise CorruptEntry(f"unknown state {raw_state[:40]!r}")
    token = _integer("token", get(b"token"))
    if token is None:  # an entry of the layout before the rename
        token = _integer("attempts", get(b"attempts"))
    if token is None:
        raise CorruptEntry("no token (the fencing token)")
    finished_at = _integer("finished_at", get(b"finished_at"))
    if finished_at is None:
        finished_at = stream_ms(stream_id)
    task, error, reason = get(b"task"), get(b"error"), get(b"reason")
    unknown = values.keys() - _KNOWN_BYTES
    return FinishedJob(
        queue=queue,
        id=_text(job_id),
        token=token,
        state=state,
        finished_at=finished_at,
        stream_id=stream_id,
        task=_text(task) if task else None,
        result=get(b"result"),
        error=None if error is None else _text(error),
        reason=None if reason is None else _text(reason),
        failures=_integer("failures", get(b"failures")),
        created_at=_integer("created_at", get(b"created_at")),
        claimed_at=_integer("claimed_at", get(b"claimed_at")),
        extra={_text(name): _text(values[name]) for name in unknown} if unknown else {},
    )


def entry_fields(job: FinishedJob) -> Mapping[str, bytes | str | int]:
    """The stream fields that :func:`parse_entry` reads back as ``job`` (tests, benchmarks)."""
    fields: dict[str, bytes | str | int] = {
        "id": job.id,
        "state": str(job.state),
        "token": job.token,
        "finished_at": job.finished_at,
    }
    for name in ("task", "result", "error", "reason", "failures", "created_at", "claimed_at"):
        value = getattr(job, name)
        if value is not None:
            fields[name] = value
    fields.update(job.extra)
    return fields
