"""A repeatable as stored: its record ``emq:{q}:repeat:<key>`` read into a value.

Rule 1: the record carries its layout version (field ``v``); :func:`read_record` refuses
one of another version (:class:`~echomq.errors.RepeatFormatError`) instead of guessing at
its fields.
Rule 2: this is data; the schedule's arithmetic is ``Schedule``'s (``schedule.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import attrs

from ..errors import InvalidArgument, RepeatFormatError
from .schedule import DEFAULT_GRACE_MS, MissedPolicy, Schedule, check_missed

__all__ = ["RepeatInfo", "RepeatSource", "pairs", "read_record", "run_id"]

RepeatSource = Literal["api", "task"]


def run_id(key: str, slot: int) -> str:
    """The job id of a repeatable's run at ``slot``: one slot is one job (docs/repeat.md)."""
    return f"{key}~{slot}"


def _text(row: Mapping[bytes, bytes], name: str, default: str = "") -> str:
    value = row.get(name.encode())
    return default if value is None else value.decode("utf-8", "replace")


def _int(row: Mapping[bytes, bytes], name: str, default: int | None = None) -> int | None:
    value = row.get(name.encode())
    if value is None or value == b"":
        return default
    try:
        return int(value)
    except ValueError:
        return int(float(value)) if value not in (b"inf", b"+inf") else default


@attrs.frozen(kw_only=True)
class RepeatInfo:
    """One registered repeatable. Times are server-clock epoch milliseconds.

    ``next_ms`` is the slot it fires next (None while ``paused``); ``runs`` the runs it
    enqueued, ``coalesced`` the due slots merged into a later run and ``skipped`` the
    slots dropped (``missed="skip"``) after downtime (docs/repeat.md, "Missed runs").
    """

    key: str
    task: str
    schedule: Schedule
    payload: bytes
    next_ms: int | None
    paused: bool
    missed: MissedPolicy
    grace_ms: int
    priority: int
    max_attempts: int
    source: RepeatSource
    runs: int
    coalesced: int
    skipped: int
    last_job: str | None
    last_slot: int | None
    fired_at: int | None
    created_at: int | None
    updated_at: int | None
    # each run's deadline, ms after its own slot (docs/runtime.md "Expiry"); None: none
    expires_ms: int | None = None

    def upcoming(self, n: int = 3) -> list[int]:
        """The next ``n`` slots (none while paused)."""
        if self.next_ms is None or n <= 0:
            return []
        return self.schedule.upcoming(self.next_ms, n)


def read_record(key: str, row: Mapping[bytes, bytes], version: int) -> RepeatInfo:
    """The record's fields (HGETALL) as a :class:`RepeatInfo`.

    Raises:
        RepeatFormatError: the record's layout version is not ``version``.
    """
    found = _text(row, "v")
    if found != str(version):
        raise RepeatFormatError(
            f"repeat record {key!r} has layout version {found or '(none)'}, this echomq "
            f"reads version {version}: it was written by another echomq (upgrade this one "
            "to read it; `echomq repeat remove` deletes it)"
        )
    try:
        return _read(key, row)
    except (InvalidArgument, ValueError) as exc:  # a record edited by hand: refused too
        raise RepeatFormatError(f"repeat record {key!r} is malformed: {exc}") from None


def _read(key: str, row: Mapping[bytes, bytes]) -> RepeatInfo:
    every = _int(row, "every_ms")
    if every is not None:
        schedule = Schedule.of(every=every / 1000)
    else:
        schedule = Schedule.of(cron=_text(row, "cron"), tz=_text(row, "tz", "UTC") or "UTC")
    source = _text(row, "source", "api")
    paused = b"paused" in row
    return RepeatInfo(
        key=key,
        task=_text(row, "task"),
        schedule=schedule,
        payload=row.get(b"payload", b""),
        next_ms=None if paused else _int(row, "next"),
        paused=paused,
        missed=check_missed(_text(row, "missed", "once")),
        grace_ms=_int(row, "grace_ms", DEFAULT_GRACE_MS) or DEFAULT_GRACE_MS,
        priority=_int(row, "priority", 0) or 0,
        max_attempts=_int(row, "max_attempts", 1) or 1,
        source="task" if source == "task" else "api",
        runs=_int(row, "runs", 0) or 0,
        coalesced=_int(row, "coalesced", 0) or 0,
        skipped=_int(row, "skipped", 0) or 0,
        last_job=_text(row, "last_job") or None,
        last_slot=_int(row, "last_slot"),
        fired_at=_int(row, "fired_at"),
        created_at=_int(row, "created_at"),
        updated_at=_int(row, "updated_at"),
        expires_ms=_int(row, "expires_ms"),
    )


def pairs(flat: Sequence[Any]) -> dict[bytes, bytes]:
    """A flat HGETALL reply as a dict of bytes."""
    out: dict[bytes, bytes] = {}
    for i in range(0, len(flat) - 1, 2):
        name, value = flat[i], flat[i + 1]
        out[name if isinstance(name, bytes) else str(name).encode()] = (
            value if isinstance(value, bytes) else str(value).encode()
        )
    return out
