"""Waiting for outcomes, without I/O: the rules of ``echomq.results``, once for every loop.

The trio :class:`~echomq.results.ResultFeed`, the asyncio
:class:`~echomq._client.aio_results.AsyncioResultFeed` and the blocking
``SyncConnection.wait_outcome`` are each a thin loop (their own connection, clock, events,
timeouts and cancellation) around one :class:`Waiters`: who waits for which job, from
which stream id on, when the reader may read and from where, which entry answers whom,
which rows to re-read and when, the reconnect backoff and the counts (results.py rules 1,
2 and 4). The commands it asks for and the replies it reads are here too (:class:`Outcome`
from a row or a completions entry, the first read of a waiter, the ``XREAD``).

:func:`first_read` and :func:`check_rows` are the two steps every loop takes the same way:
they await nothing but the connection's ``execute_pipeline`` (a trio, an asyncio or a
blocking one: ``run_sync`` drives the last).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import attrs

from .._jitter import Backoff
from .._model.completion import CorruptEntry, FinishState, parse_entry
from .._model.states import TERMINAL_STATES, JobState
from .._scripts.keyspace import keyspace
from .._wire.connection import Arg
from ..errors import PermissionDenied, ScriptError, ServerError
from ..jobs.lifecycle import JobInfo, read_job

__all__ = [
    "BATCH",
    "BLOCK",
    "GONE_CHECK",
    "Outcome",
    "Statistics",
    "Waiter",
    "Waiters",
    "check_rows",
    "first_read",
    "row_outcome",
]

log = logging.getLogger("echomq.results")

GONE_CHECK = 30.0  # seconds between the reader's checks that waited-on rows still exist
BLOCK = 5.0  # seconds one XREAD blocks
BATCH = 1000  # entries one XREAD reads


@attrs.frozen(kw_only=True)
class Outcome:
    """How a job finished: ``result`` (the codec's bytes) when completed, ``error`` when
    dead, ``reason`` (may be empty) when cancelled."""

    state: FinishState
    result: bytes | None = None
    error: str | None = None
    reason: str | None = None


def row_outcome(info: JobInfo) -> Outcome | None:
    """The outcome a row records, or None while the job has not finished."""
    if info.state is JobState.DEAD:
        return Outcome(state=FinishState.DEAD, error=info.last_error)
    if info.state is JobState.CANCELLED:
        return Outcome(state=FinishState.CANCELLED, reason=info.cancel_reason or "")
    if info.state is JobState.EXPIRED:
        return Outcome(state=FinishState.EXPIRED, error="expired")
    if info.state is not JobState.COMPLETED:
        return None
    return Outcome(state=FinishState.COMPLETED, result=info.result or b"")


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _flat(fields: Any) -> list[bytes]:
    """An entry's fields as a flat list (redis-py answers a dict)."""
    if isinstance(fields, Mapping):
        return [x for pair in fields.items() for x in pair]
    return list(fields)


def _entry_job_id(fields: Sequence[bytes]) -> str | None:
    """The job id of an entry, cheaply: the scripts write ``id`` first."""
    if len(fields) >= 2 and fields[0] == b"id":
        return fields[1].decode("utf-8", "replace")
    for i in range(0, len(fields) - 1, 2):
        if fields[i] == b"id":
            return fields[i + 1].decode("utf-8", "replace")
    return None


def _stream_entries(reply: Any) -> list[tuple[str, list[bytes]]]:
    """An ``XREAD`` reply of one stream as ``(id, flat fields)`` pairs; from the trio wire
    or from redis-py (whose fields are a dict, and over RESP3 its reply a dict).

    Raises:
        ScriptError: an unexpected shape.
    """
    if not reply:  # None (the trio wire) or [] (redis-py): nothing came
        return []
    try:
        entries = next(iter(reply.values())) if isinstance(reply, Mapping) else reply[0][1]
        return [(_s(item[0]), _flat(item[1]) if item[1] is not None else []) for item in entries]
    except (TypeError, IndexError, KeyError, StopIteration):
        raise ScriptError(f"unexpected stream reply {reply!r:.200}") from None


@attrs.define(eq=False)
class Statistics:
    """What one reader did: XREADs, entries read, entries handed to waiters, Redis errors
    (each a reconnect), row checks."""

    reads: int = 0
    entries: int = 0
    delivered: int = 0
    redis_errors: int = 0
    row_checks: int = 0


@attrs.define(eq=False)
class Waiter:
    """One call waiting for one job's outcome; ``wake`` is called once it is answered."""

    job_id: str
    since: float
    wake: Callable[[], object]
    answered: bool = False
    started: bool = False  # its first read answered: the reader may start after its id
    after: str = "0-0"
    outcome: Outcome | None = None
    error: BaseException | None = None

    def deliver(self, outcome: Outcome | None) -> bool:
        """Answer it (once); True when this answered it."""
        if self.answered:
            return False
        self.answered, self.outcome = True, outcome
        self.wake()
        return True

    def fail(self, error: BaseException) -> None:
        """The reader stopped on a bug: the waiter raises it rather than hang."""
        if not self.answered:
            self.answered, self.error = True, error
            self.wake()

    def value(self) -> Outcome | None:
        """The outcome (None: the job has no row).

        Raises:
            the reader's error (:meth:`fail`).
        """
        if self.error is not None:
            raise self.error
        return self.outcome


class Waiters:
    """The waiters of one queue's reader, and the reader's place in the stream.

    ``clock``: the loop's monotonic seconds. ``block``: seconds one ``XREAD`` blocks (at
    most ``gone_check``: the row checks run between reads).
    """

    def __init__(
        self,
        queue: str,
        clock: Callable[[], float],
        *,
        gone_check: float = GONE_CHECK,
        block: float = BLOCK,
        batch: int = BATCH,
    ) -> None:
        self.queue = keyspace(queue).queue
        self._clock = clock
        self.gone_check = gone_check
        self.block_ms = max(1, round(min(block, gone_check) * 1000))
        self.batch = batch
        self.by_job: dict[str, list[Waiter]] = {}
        self.statistics = Statistics()
        self._unstarted = 0
        self._changed: Callable[[], object] | None = None
        self._position: str | None = None
        self._recheck = False  # after a Redis error: every waiter's row is read again
        self._next_check: float | None = None  # the first due() sets it
        self._backoff = Backoff(0.05, 5.0)
        self._refused: str | None = None  # the refusal last logged (rule 5)

    @property
    def count(self) -> int:
        """Waiters now."""
        return sum(len(waiters) for waiters in self.by_job.values())

    # -- a waiting call (rule 1: register, read the row, read the stream after it) ---------

    def add(self, job_id: str, wake: Callable[[], object]) -> Waiter:
        """Register first: from now on an entry for the job reaches it.

        Raises:
            InvalidKey: a bad id (before any I/O).
        """
        keyspace(self.queue).job(job_id)  # the id's gate
        waiter = Waiter(job_id, self._clock(), wake)
        self.by_job.setdefault(job_id, []).append(waiter)
        self._unstarted += 1
        return waiter

    def first_commands(self, waiter: Waiter) -> list[tuple[Arg, ...]]:
        """The stream's last entry and the job's row, in this order (one pipeline)."""
        ks = keyspace(self.queue)
        return [
            ("XREVRANGE", ks.completions, "+", "-", "COUNT", 1),
            ("HGETALL", ks.job(waiter.job_id)),
        ]

    def first_replies(self, waiter: Waiter, replies: Sequence[Any]) -> bool:
        """Read :meth:`first_commands`' replies: True when they answer the waiter (a row
        with an outcome, or no row), else it starts waiting after the stream's last id.

        Raises:
            ServerError: a reply was an error. ScriptError: an unexpected shape.
        """
        for reply in replies:
            if isinstance(reply, ServerError):
                raise reply
        last, row = replies
        if not isinstance(last, list):
            raise ScriptError(f"result {waiter.job_id}: unexpected XREVRANGE reply {last!r:.200}")
        info = read_job(waiter.job_id, row)
        outcome = None if info is None else row_outcome(info)
        if info is None or outcome is not None:
            waiter.deliver(outcome)
            return True
        waiter.started, waiter.after = True, _s(last[0][0]) if last else "0-0"
        self._unstarted -= 1
        self._changes()
        return False

    def remove(self, waiter: Waiter) -> None:
        """The call returned (answered, cancelled, or failed)."""
        if not waiter.started:
            self._unstarted -= 1
            self._changes()
        waiters = self.by_job.get(waiter.job_id, [])
        if waiter in waiters:
            waiters.remove(waiter)
        if not waiters:
            self.by_job.pop(waiter.job_id, None)

    # -- the reader (rule 2: one per queue) ----------------------------------------------

    def ready(self) -> bool:
        """Waiters wait, and each has its start: the reader may read. (Nobody waits: it
        starts afresh after the next waiters.)"""
        if not self.by_job:
            self._position = None
            return False
        return self._unstarted == 0

    def on_change(self, callback: Callable[[], object] | None) -> None:
        """``callback`` is called at the next change of who waits (the parked reader's)."""
        self._changed = callback

    def _changes(self) -> None:
        callback, self._changed = self._changed, None
        if callback is not None:
            callback()

    def xread(self, block_ms: int | None = None) -> tuple[Arg, ...]:
        """The next ``XREAD``: on from the reader's place, or from the earliest waiter's
        start when that is later (entries before it finished before every waiter looked).
        ``block_ms`` default: the reader's."""
        position = self._position
        starts = [w.after for waiters in self.by_job.values() for w in waiters if w.started]
        if starts:
            earliest = min(starts, key=_id_key)
            if position is None or _id_key(earliest) > _id_key(position):
                position = earliest
        self._position = position = position or "0-0"
        block = self.block_ms if block_ms is None else block_ms
        ks = keyspace(self.queue)
        return ("XREAD", "COUNT", self.batch, "BLOCK", block, "STREAMS", ks.completions, position)

    def read(self, reply: Any) -> None:
        """Hand the entries of an ``XREAD`` reply to the waiters of their jobs."""
        stats = self.statistics
        stats.reads += 1
        for stream_id, fields in _stream_entries(reply):
            self._position = stream_id
            stats.entries += 1
            job_id = _entry_job_id(fields)
            waiters = self.by_job.get(job_id) if job_id is not None else None
            if not waiters:
                continue
            try:
                job = parse_entry(self.queue, stream_id, fields)
            except CorruptEntry as exc:
                log.warning("completions entry %s of %s skipped: %s", stream_id, self.queue, exc)
                continue
            outcome = Outcome(
                state=job.state, result=job.result, error=job.error, reason=job.reason
            )
            stats.delivered += sum(w.deliver(outcome) for w in list(waiters))
        self._backoff.reset()

    def failed(self, exc: BaseException) -> float:
        """A Redis error (the connection lost...): seconds to wait before reading again;
        then every waiter's row is read again (entries may have been trimmed meanwhile)."""
        self.statistics.redis_errors += 1
        self._recheck = True
        delay = self._backoff.next()
        log.warning("results of %s: %s; reading again in %.2f s", self.queue, exc, delay)
        return delay

    def refused(self, exc: PermissionDenied) -> float:
        """An ACL refusal of the reads (rule 5): not an outage, so not retried for the
        waiters: each one raises it, logged once (again only when it changes). Answers the
        seconds to wait before reading again for later waiters (an ACL fixed meanwhile
        works at once)."""
        self.statistics.redis_errors += 1
        self._recheck = True
        if str(exc) != self._refused:
            self._refused = str(exc)
            log.error("results of %s: %s", self.queue, exc)
        self.fail_all(exc)
        return self._backoff.next()

    def fail_all(self, error: BaseException) -> None:
        """The reader stopped on a bug, or its reads were refused: every waiter raises it."""
        for waiters in list(self.by_job.values()):
            for waiter in waiters:
                waiter.fail(error)

    # -- rule 4: removal writes no entry, so rows are looked at ---------------------------

    def due(self) -> list[str]:
        """The jobs whose rows to read now: all after a Redis error, else (every
        ``gone_check``) those waited on that long."""
        now = self._clock()
        everyone = self._recheck
        if self._next_check is None:
            self._next_check = now + self.gone_check
        if not everyone and now < self._next_check:
            return []
        self._recheck = False
        self._next_check = now + self.gone_check
        return [
            job_id
            for job_id, waiters in self.by_job.items()
            if any(w.started and (everyone or now - w.since >= self.gone_check) for w in waiters)
        ]

    def state_commands(self, ids: Sequence[str]) -> list[tuple[Arg, ...]]:
        ks = keyspace(self.queue)
        return [("HGET", ks.job(i), "state") for i in ids]

    def settled(self, ids: Sequence[str], states: Sequence[Any]) -> list[str]:
        """Of :meth:`state_commands`' jobs, those gone or finished: their rows to read."""
        self.statistics.row_checks += 1
        return [i for i, state in zip(ids, states, strict=True) if _settled(state)]

    def row_commands(self, ids: Sequence[str]) -> list[tuple[Arg, ...]]:
        ks = keyspace(self.queue)
        return [("HGETALL", ks.job(i)) for i in ids]

    def answer_rows(self, ids: Sequence[str], rows: Sequence[Any]) -> None:
        """A gone row answers None, a finished one its outcome; a live one nothing."""
        for job_id, row in zip(ids, rows, strict=True):
            if isinstance(row, ServerError):
                continue
            info = read_job(job_id, row)
            outcome = None if info is None else row_outcome(info)
            if info is not None and outcome is None:
                continue  # live again (reprocessed, or an id re-used)
            for waiter in list(self.by_job.get(job_id, [])):
                waiter.deliver(outcome)


class Pipelining(Protocol):
    """What the shared steps need of a connection (trio, asyncio or blocking)."""

    async def execute_pipeline(self, commands: Sequence[Sequence[Arg]]) -> list[Any]: ...


async def first_read(waiters: Waiters, conn: Pipelining, waiter: Waiter) -> bool:
    """Rule 1's read for ``waiter`` (registered): True when it is answered now.

    Raises:
        ConnectionLost, ServerError: the row could not be read (nothing waits then).
    """
    replies = await conn.execute_pipeline(waiters.first_commands(waiter))
    return waiters.first_replies(waiter, replies)


async def check_rows(waiters: Waiters, conn: Pipelining) -> None:
    """Rule 4: read the states of the due rows; a gone or finished row answers them."""
    ids = waiters.due()
    if not ids:
        return
    look = waiters.settled(ids, await conn.execute_pipeline(waiters.state_commands(ids)))
    if look:
        waiters.answer_rows(look, await conn.execute_pipeline(waiters.row_commands(look)))


def _id_key(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


def _settled(state: Any) -> bool:
    if isinstance(state, ServerError):
        return False
    if state is None:
        return True
    try:
        return JobState(_s(state)) in TERMINAL_STATES
    except ValueError:
        return False
