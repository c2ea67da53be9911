"""Waiting for a job's outcome from asyncio (``aresult``): the rules of ``results.py``.

``AsyncioResultFeed`` is the asyncio twin of :class:`~echomq._verbs.results.ResultFeed`,
one per queue and event loop, with the same builders and readers (no second copy of a key
or a reply shape):
Rule 1 (register, read the row, read the stream after it): a waiter registers, then reads
the stream's last id and the job's row in one pipeline; a finished row answers at once,
otherwise the finishing script writes the row and the completions entry together, after
that id. No pub/sub, no polling: nothing is missed.
Rule 2 (one reader per queue and loop): one task runs a blocking ``XREAD`` on a connection
of its own (the loop's shared connection stays free for the other calls) and hands each
entry to the waiters of its job; it reads nothing while nobody waits. After a reconnect it
reads on from where it was and re-reads every waiter's row.
Rule 3 (removal is not an outcome): every ``gone_check`` seconds the rows of those who
waited that long are re-read; a gone row answers None (``JobGone`` for the handle).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import attrs

from .._jitter import Backoff
from .._redis.aio import AsyncioClusterConnection, AsyncioConnection, asyncio_connection
from .._redis.keyspace import keyspace
from ..config import ConnectionConfig
from ..errors import ConnectionLost, ServerError
from .lifecycle import read_job
from .results import (
    BATCH,
    BLOCK,
    GONE_CHECK,
    Outcome,
    entry_job_id,
    entry_outcome,
    probe_commands,
    read_probe,
    read_stream_entries,
    row_outcome,
    xread_command,
)

__all__ = ["AsyncioResultFeed"]

log = logging.getLogger("echomq.results")

AnyConnection = AsyncioConnection | AsyncioClusterConnection


def _now() -> float:
    return asyncio.get_running_loop().time()


def _id_key(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


@attrs.define(eq=False)
class _Slot:
    job_id: str
    started: bool = False
    after: str = "0-0"
    since: float = attrs.field(factory=_now)
    done: asyncio.Event = attrs.field(factory=asyncio.Event)
    outcome: Outcome | None = None
    error: BaseException | None = None

    def deliver(self, outcome: Outcome | None) -> None:
        if not self.done.is_set():
            self.outcome = outcome
            self.done.set()

    def fail(self, error: BaseException) -> None:
        if not self.done.is_set():
            self.error = error
            self.done.set()


class AsyncioResultFeed:
    """One reader of a queue's completions stream on one asyncio loop (rule 2); started
    by the first :meth:`wait`, stopped by :meth:`aclose`."""

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
        self.block_ms = max(1, round(min(block, gone_check) * 1000))
        self.batch = batch
        self.reads = 0
        self.redis_errors = 0
        self._slots: dict[str, list[_Slot]] = {}
        self._unstarted = 0
        self._changed = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        self._conn: AnyConnection | None = None
        self._closed = False

    @property
    def waiting(self) -> int:
        """Waiters now."""
        return sum(len(slots) for slots in self._slots.values())

    async def wait(self, conn: AnyConnection, job_id: str) -> Outcome | None:
        """The job's outcome (None: no row); ``conn`` reads the row (rule 1).

        Raises:
            InvalidKey: before any I/O. ConnectionLost, ServerError: the row could not be
                read (nothing waits then).
        """
        keyspace(self.queue).job(job_id)  # the id's gate, before any I/O
        slot = _Slot(job_id)
        self._slots.setdefault(job_id, []).append(slot)
        self._unstarted += 1
        try:
            replies = await conn.execute_pipeline(probe_commands(self.queue, job_id))
            probe = read_probe(job_id, replies)
            if probe.info is None:
                return None
            outcome = row_outcome(probe.info)
            if outcome is not None:
                return outcome
            slot.started, slot.after = True, probe.after
            self._unstarted -= 1
            self._changed.set()
            if self._reader is None or self._reader.done():
                self._reader = asyncio.get_running_loop().create_task(self._run())
            await slot.done.wait()
            if slot.error is not None:
                raise slot.error
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
        return bool(self._slots) and self._unstarted == 0

    async def _idle(self) -> None:
        while not self._ready() and not self._closed:
            self._changed = asyncio.Event()
            await self._changed.wait()

    async def _run(self) -> None:
        try:
            await self._read_loop()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug: every waiter learns it rather than hanging
            log.exception("results of %s: the reader stopped", self.queue)
            for slots in self._slots.values():
                for slot in slots:
                    slot.fail(exc)

    async def _read_loop(self) -> None:
        backoff = Backoff(0.05, 5.0)
        position: str | None = None
        recheck = False
        next_check = _now() + self.gone_check
        while True:
            if not self._slots:
                position = None
            await self._idle()
            if self._closed:  # redis-py may swallow a cancel: the flag stops the loop too
                return
            starts = [s.after for slots in self._slots.values() for s in slots if s.started]
            if starts:
                earliest = min(starts, key=_id_key)
                if position is None or _id_key(earliest) > _id_key(position):
                    position = earliest
            assert position is not None
            if self._conn is None:
                self._conn = asyncio_connection(self.url)
            conn = self._conn
            try:
                if recheck:
                    await self._check_rows(conn, everyone=True)
                    recheck = False
                command = xread_command(
                    self.queue, position, count=self.batch, block_ms=self.block_ms
                )
                try:
                    async with asyncio.timeout(self.block_ms / 1000 + 10.0):
                        reply = await conn.execute(*command)
                except TimeoutError:  # a half-open socket: no reply to a BLOCK
                    self._conn = None
                    await conn.aclose()
                    raise ConnectionLost("no reply to a blocking XREAD") from None
                self.reads += 1
                for stream_id, fields in read_stream_entries(reply):
                    position = stream_id
                    self._dispatch(stream_id, fields)
                if _now() >= next_check:
                    await self._check_rows(conn, everyone=False)
                    next_check = _now() + self.gone_check
                backoff.reset()
            except (ConnectionLost, ServerError) as exc:
                task = asyncio.current_task()
                if task is not None and task.cancelling():  # a driver turned the cancel
                    raise asyncio.CancelledError from exc  # into an error: stop all the same
                self.redis_errors += 1
                recheck = True
                delay = backoff.next()
                log.warning("results of %s: %s; reading again in %.2f s", self.queue, exc, delay)
                await asyncio.sleep(delay)

    def _dispatch(self, stream_id: str, fields: list[bytes]) -> None:
        raw = entry_job_id(fields)
        slots = self._slots.get(raw.decode("utf-8", "replace")) if raw is not None else None
        if not slots:
            return
        outcome = entry_outcome(self.queue, stream_id, fields)
        if outcome is not None:
            for slot in slots:
                slot.deliver(outcome)

    async def _check_rows(self, conn: AnyConnection, *, everyone: bool) -> None:
        """Re-read the waited-on rows (all after a reconnect, else those waiting longer
        than ``gone_check``); a gone or finished row answers its waiters (rule 3)."""
        now = _now()
        ids = [
            job_id
            for job_id, slots in self._slots.items()
            if any(s.started and (everyone or now - s.since >= self.gone_check) for s in slots)
        ]
        if not ids:
            return
        ks = keyspace(self.queue)
        rows: list[Any] = await conn.execute_pipeline([("HGETALL", ks.job(i)) for i in ids])
        for job_id, row in zip(ids, rows, strict=True):
            if isinstance(row, ServerError):
                continue
            info = read_job(job_id, row)
            outcome = None if info is None else row_outcome(info)
            if info is not None and outcome is None:
                continue  # still running (or live again)
            for slot in self._slots.get(job_id, []):
                slot.deliver(outcome)

    async def aclose(self) -> None:
        """Stop the reader and close its connection."""
        self._closed = True
        self._changed.set()
        reader, self._reader = self._reader, None
        if reader is not None and not reader.done():
            reader.cancel()
            try:
                await reader
            except asyncio.CancelledError:
                pass
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.aclose()
