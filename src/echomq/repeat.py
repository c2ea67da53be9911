"""Repeatable jobs (docs/repeat.md): the registry verbs and the scheduler's pass.

- ``add`` (upsert), ``remove``, ``pause``, ``resume``, ``get``, ``list_repeats``: the
  registry, ``emq:{q}:repeat`` (a zset by next slot, +inf while paused) and one record per
  key, ``emq:{q}:repeat:<key>`` (schedule, next slot, last run, counts, layout version).
- ``tick``: one pass of the scheduler side, which every worker runs (no leader): read the
  records due on the server clock (``repeat_due``), plan each (``Schedule.plan``: the cron
  arithmetic is Python's), and fire it through the enqueue script with a compare-and-set on
  its ``next`` slot (``enqueue.lua``'s repeat tail): of any number of racing schedulers one
  fires the slot; the run's job id ``<key>~<slot>`` makes one slot one job even so.

Each builder gates its arguments before any I/O; a refusal changes nothing.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from typing import Any

import attrs

from ._model.job import NewJob
from ._model.repeat import RepeatInfo, RepeatSource, pairs, read_record, run_id
from ._model.schedule import (
    DEFAULT_GRACE_MS,
    MISSED_POLICIES,
    MissedPolicy,
    Plan,
    Schedule,
    check_missed,
)
from ._scripts import validate as v
from ._scripts.calls import REPEAT_FORMAT, Executor, ScriptCall, evaluate, script_call
from ._scripts.keyspace import Keyspace, check_repeat_key, keyspace
from ._scripts.replies import as_int, text
from ._wire.interface import RedisConnection
from .admin.views import server_now_ms
from .errors import InvalidArgument, RepeatFormatError, RepeatNotFound, ScriptError
from .jobs.lifecycle import enqueue_call

__all__ = [
    "add",
    "add_call",
    "Added",
    "DEFAULT_GRACE_MS",
    "due_call",
    "DueBatch",
    "fire_call",
    "FireOutcome",
    "get",
    "list_call",
    "list_repeats",
    "MAX_PAGE",
    "MISSED_POLICIES",
    "MissedPolicy",
    "pause",
    "pause_call",
    "Plan",
    "remove",
    "remove_call",
    "RepeatInfo",
    "RepeatListing",
    "resume",
    "resume_call",
    "run_id",
    "Schedule",
    "skip_call",
    "tick",
    "Tick",
]

log = logging.getLogger("echomq.repeat")

MAX_PAGE = v.MAX_REPEAT_PAGE  # records per repeat_due / repeat_list call


class FireOutcome(enum.IntEnum):
    """What firing a due slot did (``enqueue.lua``'s repeat tail)."""

    RACED = 0  # not fired: another scheduler moved `next` first (or paused / removed it)
    FIRED = 1  # the run's job was written, `next` advanced
    EXISTS = 2  # the run's job existed already: `next` advanced, nothing else written


@attrs.frozen(kw_only=True)
class Added:
    """What ``add`` did: ``created`` (a new key) or updated; ``rescheduled`` when the
    schedule changed (the next slot is recomputed; an unchanged one keeps its slot)."""

    key: str
    created: bool
    rescheduled: bool
    next_ms: int


@attrs.frozen(kw_only=True)
class RepeatListing:
    """A queue's registry: ``records`` in order of next slot (paused last); ``unreadable``
    holds (key, reason) for records of another layout version."""

    now_ms: int
    total: int
    paused: int
    records: list[RepeatInfo]
    unreadable: list[tuple[str, str]]


@attrs.frozen(kw_only=True)
class DueBatch:
    """The scheduler's read: server now, the queue's gate, the earliest slot after now
    (None: no other record), and the due records as stored (key, fields)."""

    now_ms: int
    paused: bool
    next_ms: int | None
    due: list[tuple[str, dict[bytes, bytes]]]


@attrs.frozen(kw_only=True)
class Tick:
    """One scheduler pass: the runs it enqueued (job ids), the slots it left to a faster
    scheduler (``raced``), the keys whose due run it skipped by policy, the keys it could
    not read (another layout version), and when to look again."""

    now_ms: int
    fired: list[str]
    raced: int
    skipped: list[str]
    unreadable: list[str]
    next_ms: int | None  # the earliest slot after now (None: none known)
    full: bool  # the page was full: more may be due now
    paused: bool  # the queue is paused: nothing fires


def _as_list(reply: Any, what: str) -> list[Any]:
    if not isinstance(reply, list):
        raise ScriptError(f"{what}: unexpected reply {reply!r}")
    return reply


def _records(flat: list[Any], what: str) -> list[tuple[str, dict[bytes, bytes]]]:
    if len(flat) % 2:
        raise ScriptError(f"{what}: unexpected reply {flat!r}")
    out = []
    for i in range(0, len(flat), 2):
        out.append((text(flat[i]), pairs(_as_list(flat[i + 1], what))))
    return out


# -- builders (no I/O) ---------------------------------------------------------------------


def add_call(
    queue: str,
    key: str,
    *,
    task: str,
    payload: bytes | str,
    schedule: Schedule,
    first_ms: int,
    missed: MissedPolicy = "once",
    grace_ms: int = DEFAULT_GRACE_MS,
    priority: int = 0,
    max_attempts: int = 1,
    source: RepeatSource = "api",
    expires_ms: int | None = None,
) -> ScriptCall[Added]:
    ks = keyspace(queue)
    if not isinstance(schedule, Schedule):
        raise InvalidArgument(f"schedule must be a Schedule, not {schedule!r}")
    if not isinstance(task, str) or not task:
        raise InvalidArgument("task must be a non-empty str (the task's name)")
    argv = [
        check_repeat_key(key),
        ks.base,
        task,
        v.payload_bytes(payload),
        "" if schedule.every_ms is None else schedule.every_ms,
        schedule.cron or "",
        schedule.tz if schedule.cron else "",
        check_missed(missed),
        v.positive_int("grace_ms", grace_ms, v.MAX_MS),
        v.int_in("priority", priority, -v.MAX_PRIORITY, v.MAX_PRIORITY),
        v.positive_int("max_attempts", max_attempts, v.MAX_ATTEMPTS),
        "task" if source == "task" else "api",
        v.non_negative_int("first_ms", first_ms),
    ]
    if expires_ms is not None:
        argv.append(v.positive_int("expires_ms", expires_ms, v.MAX_MS))

    def read(reply: Any) -> Added:
        status, next_ms = _as_list(reply, f"repeat add {key}")
        if status not in (1, 2, 3):
            raise ScriptError(f"repeat add {key}: unexpected reply {reply!r}")
        return Added(key=key, created=status == 1, rescheduled=status != 2, next_ms=next_ms)

    keys = [ks.repeat, ks.repeat_record(key), ks.meta]
    return script_call("repeat_add", keys, argv, read)


def _registry_call(
    name: str, queue: str, key: str, extra: list[Any], read: Callable[[Any], Any]
) -> ScriptCall[Any]:
    ks = keyspace(queue)
    keys = [ks.repeat, ks.repeat_record(key)]
    return script_call(name, keys, [check_repeat_key(key), ks.base, *extra], read)


def _gone(reply: Any, queue: str, key: str) -> None:
    if reply == -1:
        raise RepeatNotFound(f"no repeatable {key!r} in queue {queue!r}")


def remove_call(queue: str, key: str) -> ScriptCall[None]:
    def read(reply: Any) -> None:
        _gone(reply, queue, key)
        if reply != 1:
            raise ScriptError(f"repeat remove {key}: unexpected reply {reply!r}")

    return _registry_call("repeat_remove", queue, key, [], read)


def pause_call(queue: str, key: str) -> ScriptCall[bool]:
    def read(reply: Any) -> bool:
        _gone(reply, queue, key)
        if reply not in (1, 2):
            raise ScriptError(f"repeat pause {key}: unexpected reply {reply!r}")
        return bool(reply == 1)

    return _registry_call("repeat_pause", queue, key, [], read)


def resume_call(queue: str, key: str, first_ms: int) -> ScriptCall[tuple[bool, int]]:
    def read(reply: Any) -> tuple[bool, int]:
        _gone(reply, queue, key)
        status, next_ms = _as_list(reply, f"repeat resume {key}")
        return status == 1, as_int(next_ms)

    first = v.non_negative_int("first_ms", first_ms)
    return _registry_call("repeat_resume", queue, key, [first], read)


def list_call(queue: str, offset: int = 0, limit: int = MAX_PAGE) -> ScriptCall[RepeatListing]:
    ks = keyspace(queue)
    argv = [ks.base, v.non_negative_int("offset", offset), v.int_in("limit", limit, 1, MAX_PAGE)]

    def read(reply: Any) -> RepeatListing:
        flat = _as_list(reply, "repeat list")
        if len(flat) < 3:
            raise ScriptError(f"repeat list: unexpected reply {reply!r}")
        records, unreadable = [], []
        for key, row in _records(flat[3:], "repeat list"):
            try:
                records.append(read_record(key, row, REPEAT_FORMAT))
            except RepeatFormatError as exc:
                unreadable.append((key, str(exc)))
        return RepeatListing(
            now_ms=as_int(flat[0]),
            total=as_int(flat[1]),
            paused=as_int(flat[2]),
            records=records,
            unreadable=unreadable,
        )

    return script_call("repeat_list", [ks.repeat], argv, read)


def due_call(queue: str, limit: int = MAX_PAGE) -> ScriptCall[DueBatch]:
    ks = keyspace(queue)

    def read(reply: Any) -> DueBatch:
        flat = _as_list(reply, "repeat due")
        if len(flat) < 3:
            raise ScriptError(f"repeat due: unexpected reply {reply!r}")
        after = as_int(flat[2])
        return DueBatch(
            now_ms=as_int(flat[0]),
            paused=as_int(flat[1]) == 1,
            next_ms=None if after < 0 else after,
            due=_records(flat[3:], "repeat due"),
        )

    argv = [ks.base, v.int_in("limit", limit, 1, MAX_PAGE)]
    return script_call("repeat_due", [ks.repeat, ks.meta], argv, read)


def fire_call(queue: str, info: RepeatInfo, due_ms: int, plan: Plan) -> ScriptCall[FireOutcome]:
    """Enqueue the run ``plan.slot`` of ``info`` if its record's next slot is still
    ``due_ms``, and advance it to ``plan.next_ms``: the enqueue script, with its repeat tail."""
    ks = keyspace(queue)
    job = NewJob(
        payload=info.payload,
        job_id=run_id(info.key, plan.slot),
        priority=info.priority,
        max_attempts=info.max_attempts,
        task=info.task,  # on the row: the completions entry carries it (docs/results.md)
        # its deadline, from its own slot (a late run, missed="once", may expire at once)
        expires_at_ms=None if info.expires_ms is None else plan.slot + info.expires_ms,
    )
    sc = enqueue_call(queue, [job])
    tail: list[str | bytes | int | float] = [
        info.key,
        v.non_negative_int("due_ms", due_ms),
        v.non_negative_int("next_ms", plan.next_ms),
        v.non_negative_int("slot", plan.slot),
        v.non_negative_int("coalesced", plan.coalesced),
    ]

    def read(reply: Any) -> FireOutcome:
        try:
            return FireOutcome(reply)
        except ValueError:
            raise ScriptError(f"repeat fire {info.key}: unexpected reply {reply!r}") from None

    keys = [*sc.keys, ks.repeat, ks.repeat_record(info.key)]
    return ScriptCall(sc.script, keys, [*sc.argv, *tail], read)


def skip_call(queue: str, key: str, due_ms: int, plan: Plan) -> ScriptCall[bool]:
    ks = keyspace(queue)
    argv = [
        check_repeat_key(key),
        v.non_negative_int("due_ms", due_ms),
        v.non_negative_int("next_ms", plan.next_ms),
        plan.coalesced + 1,
    ]

    def read(reply: Any) -> bool:
        if reply not in (0, 1):
            raise ScriptError(f"repeat skip {key}: unexpected reply {reply!r}")
        return bool(reply == 1)

    return script_call("repeat_skip", [ks.repeat, ks.repeat_record(key)], argv, read)


# -- verbs ------------------------------------------------------------------------------------


async def add(
    conn: RedisConnection,
    queue: str,
    key: str,
    *,
    task: str,
    payload: bytes | str,
    schedule: Schedule,
    missed: MissedPolicy = "once",
    grace_ms: int = DEFAULT_GRACE_MS,
    priority: int = 0,
    max_attempts: int = 1,
    source: RepeatSource = "api",
    expires_ms: int | None = None,
) -> Added:
    """Register the repeatable ``key`` (or update it: an upsert).

    Its first slot is the schedule's first after the server's now; an update that keeps
    the schedule keeps the record's next slot (so registering the same schedule again,
    from any number of workers, changes nothing). A paused record stays paused.
    ``expires_ms``: each run's deadline, that long after its own slot (docs/runtime.md
    "Expiry": a run not started by then never runs).

    Raises:
        InvalidKey, InvalidArgument, SerializationError: before any I/O.
        RepeatFormatError: the record was written by another echomq; nothing written.
    """

    def call(first_ms: int) -> ScriptCall[Added]:
        return add_call(
            queue,
            key,
            task=task,
            payload=payload,
            schedule=schedule,
            first_ms=first_ms,
            missed=missed,
            grace_ms=grace_ms,
            priority=priority,
            max_attempts=max_attempts,
            source=source,
            expires_ms=expires_ms,
        )

    call(0)  # every argument gated before any I/O
    sc = call(schedule.after(await server_now_ms(conn)))
    return await evaluate(conn, sc)


async def remove(conn: Executor, queue: str, key: str) -> None:
    """Delete the repeatable ``key`` (its record and registry entry); its runs already
    enqueued stay.

    Raises:
        InvalidKey: before any I/O. RepeatNotFound: no such key.
    """
    await evaluate(conn, remove_call(queue, key))


async def pause(conn: Executor, queue: str, key: str) -> bool:
    """Stop firing ``key`` until :func:`resume`; True if it was running (idempotent).

    Raises:
        InvalidKey: before any I/O. RepeatNotFound: no such key.
        RepeatFormatError: another echomq's record; nothing written.
    """
    return await evaluate(conn, pause_call(queue, key))


async def resume(conn: RedisConnection, queue: str, key: str) -> int:
    """Fire ``key`` again from its first slot after now (the slots due while it was
    paused do not run); answer that slot (ms). Idempotent: a running key is unchanged.

    Raises:
        InvalidKey: before any I/O. RepeatNotFound: no such key.
        RepeatFormatError: another echomq's record; nothing written.
    """
    info = await get(conn, queue, key)
    now = await server_now_ms(conn)
    _, next_ms = await evaluate(conn, resume_call(queue, key, info.schedule.after(now)))
    return next_ms


async def get(conn: Executor, queue: str, key: str) -> RepeatInfo:
    """The record of ``key``.

    Raises:
        InvalidKey: before any I/O. RepeatNotFound: no such key.
        RepeatFormatError: another echomq's record (never misread).
    """
    row = await conn.execute("HGETALL", Keyspace(queue).repeat_record(key))
    fields = pairs(row) if isinstance(row, list) else dict(row or {})
    if not fields:
        raise RepeatNotFound(f"no repeatable {key!r} in queue {queue!r}")
    return read_record(key, fields, REPEAT_FORMAT)


async def list_repeats(conn: Executor, queue: str, *, limit: int = 1000) -> RepeatListing:
    """The registry of ``queue`` (up to ``limit`` records, read a page of 100 at a time),
    in order of next slot, paused records last.

    Raises:
        InvalidKey, InvalidArgument: before any I/O.
    """
    v.positive_int("limit", limit)
    page = await evaluate(conn, list_call(queue, 0, min(limit, MAX_PAGE)))
    records, unreadable = list(page.records), list(page.unreadable)
    offset = MAX_PAGE
    while offset < min(page.total, limit):
        more = await evaluate(conn, list_call(queue, offset, min(MAX_PAGE, limit - offset)))
        records += more.records
        unreadable += more.unreadable
        offset += MAX_PAGE
    return attrs.evolve(page, records=records, unreadable=unreadable)


async def tick(conn: Executor, queue: str, *, limit: int = MAX_PAGE) -> Tick:
    """One pass of the scheduler: fire every due run of ``queue`` (up to ``limit``).

    Safe to run from any number of workers at once: each due slot is fired by exactly one
    of them (a compare-and-set on the record's next slot, in the enqueue script).

    Raises:
        InvalidKey, InvalidArgument: before any I/O.
    """
    batch = await evaluate(conn, due_call(queue, limit))
    fired: list[str] = []
    skipped: list[str] = []
    unreadable: list[str] = []
    raced = 0
    upcoming = [] if batch.next_ms is None else [batch.next_ms]
    for key, row in batch.due:
        try:
            info = read_record(key, row, REPEAT_FORMAT)
        except RepeatFormatError as exc:
            log.error("%s", exc)
            unreadable.append(key)
            continue
        due_ms = _int_field(row, b"next")
        if due_ms is None or info.paused:
            continue
        try:
            plan = info.schedule.plan(due_ms, batch.now_ms, info.missed, info.grace_ms)
        except Exception as exc:  # one bad record never stops the others' runs
            log.error("repeat record %r cannot be planned: %r", key, exc)
            unreadable.append(key)
            continue
        upcoming.append(plan.next_ms)  # (a faster scheduler planned the same slot)
        if plan.fire:
            outcome = await evaluate(conn, fire_call(queue, info, due_ms, plan))
            if outcome is FireOutcome.FIRED:
                fired.append(run_id(key, plan.slot))
            elif outcome is FireOutcome.RACED:
                raced += 1
        elif await evaluate(conn, skip_call(queue, key, due_ms, plan)):
            skipped.append(key)
        else:
            raced += 1
    return Tick(
        now_ms=batch.now_ms,
        fired=fired,
        raced=raced,
        skipped=skipped,
        unreadable=unreadable,
        next_ms=min(upcoming, default=None),
        full=len(batch.due) >= limit,
        paused=batch.paused,
    )


def _int_field(row: dict[bytes, bytes], name: bytes) -> int | None:
    value = row.get(name)
    try:
        return None if value is None else int(value)
    except ValueError:
        return None
