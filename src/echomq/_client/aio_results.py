"""Waiting for a job's outcome from asyncio (``aresult``): the rules of ``echomq.results``.

``AsyncioResultFeed`` is the asyncio loop around the same :class:`~echomq._client.waiting.Waiters`
as the trio :class:`~echomq.results.ResultFeed`, one per queue and event loop: a waiter
registers, reads the stream's last id and the job's row in one pipeline (on the loop's
shared connection), and waits; one task runs the blocking ``XREAD`` on a connection of its
own (started by the first wait, stopped by :meth:`AsyncioResultFeed.aclose`) and reads
nothing while nobody waits.
"""

from __future__ import annotations

import asyncio
import logging

from .._wire.drivers.aio import AsyncioClusterConnection, AsyncioConnection, asyncio_connection
from ..config import ConnectionConfig
from ..errors import ConnectionLost, PermissionDenied, ServerError
from .waiting import BATCH, BLOCK, GONE_CHECK, Outcome, Waiters, check_rows, first_read

__all__ = ["AsyncioResultFeed"]

log = logging.getLogger("echomq.results")

AnyConnection = AsyncioConnection | AsyncioClusterConnection


def _now() -> float:
    return asyncio.get_running_loop().time()


class AsyncioResultFeed:
    """One reader of a queue's completions stream on one asyncio loop."""

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
        self.waiters = Waiters(queue, _now, gone_check=gone_check, block=block, batch=batch)
        self.queue = self.waiters.queue
        self.statistics = self.waiters.statistics
        self._reader: asyncio.Task[None] | None = None
        self._conn: AnyConnection | None = None
        self._closed = False

    @property
    def waiting(self) -> int:
        """Waiters now."""
        return self.waiters.count

    async def wait(self, conn: AnyConnection, job_id: str) -> Outcome | None:
        """The job's outcome (None: no row); ``conn`` reads the row.

        Raises:
            InvalidKey: before any I/O. ConnectionLost, ServerError: the row could not be
                read (nothing waits then).
        """
        answered = asyncio.Event()
        waiter = self.waiters.add(job_id, answered.set)
        try:
            if not await first_read(self.waiters, conn, waiter):
                if self._reader is None or self._reader.done():
                    self._reader = asyncio.get_running_loop().create_task(self._run())
                await answered.wait()
            return waiter.value()
        finally:
            self.waiters.remove(waiter)

    async def _run(self) -> None:
        try:
            await self._read_loop()
        except asyncio.CancelledError:
            raise
        except PermissionDenied as exc:  # not an outage: every waiter raises it (results.py)
            self.waiters.refused(exc)
        except Exception as exc:  # a bug: every waiter learns it rather than hanging
            log.exception("results of %s: the reader stopped", self.queue)
            self.waiters.fail_all(exc)

    async def _read_loop(self) -> None:
        waiters = self.waiters
        while not self._closed:  # redis-py may swallow a cancel: the flag stops it too
            if not waiters.ready():
                changed = asyncio.Event()
                waiters.on_change(changed.set)
                await changed.wait()
                continue
            if self._conn is None:
                self._conn = asyncio_connection(self.url)
            conn = self._conn
            try:
                await check_rows(waiters, conn)
                command = waiters.xread()
                try:
                    async with asyncio.timeout(waiters.block_ms / 1000 + 10.0):
                        reply = await conn.execute(*command)
                except TimeoutError:  # a half-open socket: no reply to a BLOCK
                    self._conn = None
                    await conn.aclose()
                    raise ConnectionLost("no reply to a blocking XREAD") from None
                waiters.read(reply)
                # the answered calls run first and leave: when nobody waits any more the
                # reader parks instead of blocking in another XREAD, which a close would
                # have to cancel (redis.asyncio's cluster client may then leak its node's
                # connection)
                await asyncio.sleep(0)
            except PermissionDenied:
                raise  # not retried: _run hands it to the waiters
            except (ConnectionLost, ServerError) as exc:
                task = asyncio.current_task()
                if task is not None and task.cancelling():  # a driver turned the cancel
                    raise asyncio.CancelledError from exc  # into an error: stop all the same
                await asyncio.sleep(waiters.failed(exc))

    async def aclose(self) -> None:
        """Stop the reader and close its connection."""
        self._closed = True
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
