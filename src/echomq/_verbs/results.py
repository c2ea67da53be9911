"""Waiting for a job's outcome without missing it: its row, then the completions stream.

Rule 1 (register, read the row, read the stream after it): a waiter registers first, then
reads, in one pipeline, the completions stream's last id and the job's row. A finished row
answers at once. Otherwise the job has not finished yet, and the script that finishes it
writes the row and the stream entry together (docs/results.md), after that id: reading
the stream from there cannot miss it. No polling, no pub/sub: a missed event, a
subscription that reconnected or a late call cannot lose an outcome.
Rule 2 (one reader per queue): :class:`ResultFeed` runs one blocking ``XREAD`` loop on a
connection of its own and hands each entry to the waiters of its job; its cost follows the
queue's finish rate, not the number of waiters, and it reads nothing while nobody waits.
After a reconnect it reads on from where it was and re-reads the waiters' rows (entries
trimmed during an outage are then found on the rows).
Rule 3 (the row is the record): a late call reads the row, kept for the job's retention
(``keep_result`` / ``keep_dead``); no row means the job is past its retention, or was
removed: the waiter answers None and ``TaskHandle.result()`` raises ``JobGone`` saying so.
Rule 4 (removal is not an outcome): ``remove_job``, ``drain`` and ``obliterate`` write no
entry, so the reader checks the rows of its waiters every ``gone_check`` seconds (one
pipelined read for all of them): a removed job's waiter learns it within that time.
The builders and readers here (no I/O) are shared with the blocking producer
(``echomq.sync``), which waits with its own ``XREAD``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import trio

from .._jitter import Backoff
from .._model.completion import CorruptEntry, FinishState, parse_entry
from .._model.job import JobInfo
from .._model.states import CANCELLED_PREFIX, TERMINAL_STATES, JobState
from .._redis.connection import Arg
from .._redis.dial import connect
from .._redis.keyspace import keyspace
from .._redis.protocol import RedisConnection
from ..config import ConnectionConfig
from ..errors import ConnectionLost, ScriptError, ServerError
from .lifecycle import read_job

__all__ = [
    "Outcome",
    "Probe",
    "ResultFeed",
    "entry_job_id",
    "entry_outcome",
    "probe_commands",
    "read_probe",
    "read_stream_entries",
    "row_outcome",
    "xread_command",
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


@attrs.define(eq=False)
class _Slot:
    job_id: str
    started: bool = False  # its probe answered: the reader may start after its id
    after: str = "0-0"
    since: float = attrs.field(factory=trio.current_time)
    done: trio.Event = attrs.field(factory=trio.Event)
    outcome: Outcome | None = None

    def deliver(self, outcome: Outcome | None) -> None:
        if not self.done.is_set():
            self.outcome = outcome
            self.done.set()


def _id_key(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


@attrs.define(eq=False)
class ResultStatistics:
    """What one feed did: XREADs, entries read, entries handed to waiters, reconnects."""

    reads: int = 0
    entries: int = 0
    delivered: int = 0
    redis_errors: int = 0
    row_checks: int = 0


class ResultFeed:
    """One reader of a queue's completions stream, shared by every waiter of the queue.

    Start :meth:`run` in a nursery (``nursery.start``); then :meth:`wait` for a job.
    """

    def __init__(
        self,
        url: str | ConnectionConfig,
        queue: str,
        *,
        gone_check: float = GONE_CHECK,
        block: float = BLOCK,
        batch: int = BATCH,
    ) -> None:
        self.url = url
        self.queue = keyspace(queue).queue
        self.gone_check = gone_check
        # a blocking read returns at least every gone_check: the row check runs between
        self.block_ms = max(1, round(min(block, gone_check) * 1000))
        self.batch = batch
        self.statistics = ResultStatistics()
        self._slots: dict[str, list[_Slot]] = {}
        self._unstarted = 0
        self._changed = trio.Event()

    @property
    def waiting(self) -> int:
        """Waiters now."""
        return sum(len(slots) for slots in self._slots.values())

    async def wait(self, conn: RedisConnection, job_id: str) -> Outcome | None:
        """The job's outcome: at once when its row records one, else when its completions
        entry is written. None when the job has no row (past its retention, or removed).

        ``conn`` (a shared connection) reads the row; the feed's own connection blocks.

        Raises:
            InvalidKey: before any I/O. ConnectionLost, ServerError: the row could not be
                read (nothing waits then).
        """
        keyspace(self.queue).job(job_id)  # the id's gate, before any I/O
        slot = _Slot(job_id)
        self._slots.setdefault(job_id, []).append(slot)
        self._unstarted += 1
        try:
            probe = read_probe(
                job_id, await conn.execute_pipeline(probe_commands(self.queue, job_id))
            )
            if probe.info is None:
                return None
            outcome = row_outcome(probe.info)
            if outcome is not None:
                return outcome
            slot.started, slot.after = True, probe.after
            self._unstarted -= 1
            self._changed.set()
            await slot.done.wait()
            return slot.outcome
        finally:
            if not slot.started:
                self._unstarted -= 1
                self._changed.set()
            slots = self._slots.get(job_id, [])
            if slot in slots:
                slots.remove(slot)
            if not slots:
                self._slots.pop(job_id, None)

    def _ready(self) -> bool:
        """Waiters wait, and each has its start: the reader may choose where to read from."""
        return bool(self._slots) and self._unstarted == 0

    async def _idle(self) -> None:
        while not self._ready():
            self._changed = trio.Event()
            await self._changed.wait()

    async def run(
        self, *, task_status: trio.TaskStatus[ResultFeed] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Read the stream for as long as the nursery runs (idle while nobody waits)."""
        stats = self.statistics
        backoff = Backoff(0.05, 5.0)
        async with connect(self.url) as conn:
            task_status.started(self)
            position: str | None = None
            recheck = False
            next_check = trio.current_time() + self.gone_check
            while True:
                if not self._slots:
                    position = None  # nobody waits: start afresh after the next waiters
                await self._idle()
                starts = [s.after for slots in self._slots.values() for s in slots if s.started]
                if starts:
                    earliest = min(starts, key=_id_key)
                    if position is None or _id_key(earliest) > _id_key(position):
                        position = earliest  # entries before it were finished before them
                assert position is not None
                try:
                    if recheck:
                        await self._check_rows(conn, everyone=True)
                        recheck = False
                    command = xread_command(
                        self.queue, position, count=self.batch, block_ms=self.block_ms
                    )
                    with trio.move_on_after(self.block_ms / 1000 + 10.0) as guard:
                        reply = await conn.execute(*command)
                    if guard.cancelled_caught:  # a half-open socket: no reply to a BLOCK
                        conn.drop()
                        raise ConnectionLost("no reply to a blocking XREAD")
                    stats.reads += 1
                    for stream_id, fields in read_stream_entries(reply):
                        position = stream_id
                        stats.entries += 1
                        self._dispatch(stream_id, fields)
                    if trio.current_time() >= next_check:
                        await self._check_rows(conn, everyone=False)
                        next_check = trio.current_time() + self.gone_check
                    backoff.reset()
                except (ConnectionLost, ServerError) as exc:
                    stats.redis_errors += 1
                    recheck = True
                    delay = backoff.next()
                    log.warning(
                        "results of %s: %s; reading again in %.2f s", self.queue, exc, delay
                    )
                    await trio.sleep(delay)

    def _dispatch(self, stream_id: str, fields: list[bytes]) -> None:
        raw = entry_job_id(fields)
        if raw is None:
            return
        slots = self._slots.get(raw.decode("utf-8", "replace"))
        if not slots:
            return
        outcome = entry_outcome(self.queue, stream_id, fields)
        if outcome is None:
            return
        for slot in slots:
            slot.deliver(outcome)
            self.statistics.delivered += 1

    async def _check_rows(self, conn: RedisConnection, *, everyone: bool) -> None:
        """Re-read the state of the waited-on rows (all of them after a reconnect, else
        those waiting longer than ``gone_check``); a gone or finished row answers them."""
        now = trio.current_time()
        ids = [
            job_id
            for job_id, slots in self._slots.items()
            if any(s.started and (everyone or now - s.since >= self.gone_check) for s in slots)
        ]
        if not ids:
            return
        self.statistics.row_checks += 1
        ks = keyspace(self.queue)
        states = await conn.execute_pipeline([("HGET", ks.job(i), "state") for i in ids])
        look = [i for i, state in zip(ids, states, strict=True) if _settled(state)]
        if not look:
            return
        rows = await conn.execute_pipeline([("HGETALL", ks.job(i)) for i in look])
        for job_id, row in zip(look, rows, strict=True):
            if isinstance(row, ServerError):
                continue
            info = read_job(job_id, row)
            outcome = None if info is None else row_outcome(info)
            if info is not None and outcome is None:
                continue  # live again (reprocessed, or an id re-used)
            for slot in self._slots.get(job_id, []):
                slot.deliver(outcome)


def _settled(state: Any) -> bool:
    if isinstance(state, ServerError):
        return False
    if state is None:
        return True
    try:
        return JobState(_s(state)) in TERMINAL_STATES
    except ValueError:
        return False
