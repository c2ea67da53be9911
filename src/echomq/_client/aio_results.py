"""Waiting for a job's outcome from asyncio (``aresult``): the rules of ``results.py``.

``AsyncioResultFeed`` is the asyncio twin of :class:`~echomq.results.ResultFeed`,
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

from .._jitter import Backoff
from .._scripts.keyspace import keyspace
from .._wire.drivers.aio import AsyncioClusterConnection, AsyncioConnection, asyncio_connection
from ..config import ConnectionConfig
from ..errors import ConnectionLost, PermissionDenied, ServerError
from ..results import BATCH, BLOCK, GONE_CHECK
from .result_reads import (
    Outcome,
    probe_commands,
    read_probe,
    read_stream_entries,
    row_outcome,
    xread_command,
)
from .result_waiters import Waiters

__all__ = ["AsyncioResultFeed"]

log = logging.getLogger("echomq.results")

AnyConnection = AsyncioConnection | AsyncioClusterConnection


def _now() -> float:
    return asyncio.get_running_loop().time()


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
        self._waiters = Waiters(self.queue, _now, asyncio.Event)
        self._reader: asyncio.Task[None] | None = None
        self._conn: AnyConnection | None = None
        self._closed = False

    @property
    def waiting(self) -> int:
        """Waiters now."""
        return self._waiters.count

    async def wait(self, conn: AnyConnection, job_id: str) -> Outcome | None:
        """The job's outcome (None: no row); ``conn`` reads the row (rule 1).

        Raises:
            InvalidKey: before any I/O. ConnectionLost, ServerError: the row could not be
                read (nothing waits then).
        """
        keyspace(self.queue).job(job_id)  # the id's gate, before any I/O
        waiter = self._waiters.add(job_id)
        try:
            replies = await conn.execute_pipeline(probe_commands(self.queue, job_id))
            probe = read_probe(job_id, replies)
            if probe.info is None:
                return None
            outcome = row_outcome(probe.info)
            if outcome is not None:
                return outcome
            self._waiters.start(waiter, probe.after)
            if self._reader is None or self._reader.done():
                self._reader = asyncio.get_running_loop().create_task(self._run())
            await waiter.done.wait()
            if waiter.error is not None:
                raise waiter.error
            return waiter.outcome
        finally:
            self._waiters.remove(waiter)

    async def _run(self) -> None:
        try:
            await self._read_loop()
        except asyncio.CancelledError:
            raise
        except PermissionDenied as exc:  # not an outage: every waiter raises it (results.py)
            log.error("results of %s: %s", self.queue, exc)
            self._waiters.fail_all(exc)
        except Exception as exc:  # a bug: every waiter learns it rather than hanging
            log.exception("results of %s: the reader stopped", self.queue)
            self._waiters.fail_all(exc)

    async def _read_loop(self) -> None:
        backoff = Backoff(0.05, 5.0)
        position: str | None = None
        recheck = False
        next_check = _now() + self.gone_check
        waiters = self._waiters
        while True:
            if not waiters.by_job:
                position = None
            while not waiters.ready() and not self._closed:
                await waiters.renew().wait()
            if self._closed:  # redis-py may swallow a cancel: the flag stops the loop too
                return
            position = waiters.position(position)
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
                    waiters.dispatch(stream_id, fields)
                if _now() >= next_check:
                    await self._check_rows(conn, everyone=False)
                    next_check = _now() + self.gone_check
                backoff.reset()
            except PermissionDenied:
                raise  # not retried: _run hands it to the waiters
            except (ConnectionLost, ServerError) as exc:
                task = asyncio.current_task()
                if task is not None and task.cancelling():  # a driver turned the cancel
                    raise asyncio.CancelledError from exc  # into an error: stop all the same
                self.redis_errors += 1
                recheck = True
                delay = backoff.next()
                log.warning("results of %s: %s; reading again in %.2f s", self.queue, exc, delay)
                await asyncio.sleep(delay)

    async def _check_rows(self, conn: AnyConnection, *, everyone: bool) -> None:
        """Re-read the waited-on rows (all after a reconnect, else those waiting longer
        than ``gone_check``); a gone or finished row answers its waiters (rule 3)."""
        waiters = self._waiters
        ids = waiters.due(everyone=everyone, gone_check=self.gone_check)
        if not ids:
            return
        look = waiters.settled(ids, await conn.execute_pipeline(waiters.state_commands(ids)))
        if look:
            waiters.answer_rows(look, await conn.execute_pipeline(waiters.row_commands(look)))

    async def aclose(self) -> None:
        """Stop the reader and close its connection."""
        self._closed = True
        self._waiters.changed.set()
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
