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
Rule 5 (a refusal is not an outage): an ACL refusal of the reads (``PermissionDenied``: the
user lacks ``XREAD``...) is not retried for the waiters: each waiting ``result()`` raises it,
logged once (again only when it changes); later waiters read again, so an ACL fixed
meanwhile works at once.
The rules' bookkeeping, commands and readers (no I/O) are ``_client/waiting.Waiters``;
this is its trio loop (the asyncio one is ``_client/aio_results.py``, the blocking one
``SyncConnection.wait_outcome``).
"""

from __future__ import annotations

import trio

from ._client.waiting import (
    BATCH,
    BLOCK,
    GONE_CHECK,
    Outcome,
    Statistics,
    Waiters,
    check_rows,
    first_read,
)
from ._model.completion import FinishState
from ._wire.dial import connect
from ._wire.interface import RedisConnection
from .config import ConnectionConfig
from .errors import ConnectionLost, PermissionDenied, ServerError

__all__ = [
    "BATCH",
    "BLOCK",
    "FinishState",
    "GONE_CHECK",
    "Outcome",
    "ResultFeed",
    "ResultStatistics",
]

ResultStatistics = Statistics  # (its name here)


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
        self.waiters = Waiters(
            queue, trio.current_time, gone_check=gone_check, block=block, batch=batch
        )
        self.queue = self.waiters.queue
        self.statistics = self.waiters.statistics

    @property
    def waiting(self) -> int:
        """Waiters now."""
        return self.waiters.count

    async def wait(self, conn: RedisConnection, job_id: str) -> Outcome | None:
        """The job's outcome: at once when its row records one, else when its completions
        entry is written. None when the job has no row (past its retention, or removed).

        ``conn`` (a shared connection) reads the row; the feed's own connection blocks.

        Raises:
            InvalidKey: before any I/O. ConnectionLost, ServerError: the row could not be
                read (nothing waits then). PermissionDenied: the reads were refused (rule 5).
        """
        answered = trio.Event()
        waiter = self.waiters.add(job_id, answered.set)
        try:
            if not await first_read(self.waiters, conn, waiter):
                await answered.wait()
            return waiter.value()
        finally:
            self.waiters.remove(waiter)

    async def run(
        self, *, task_status: trio.TaskStatus[ResultFeed] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Read the stream for as long as the nursery runs (idle while nobody waits)."""
        waiters = self.waiters
        async with connect(self.url) as conn:
            task_status.started(self)
            while True:
                while not waiters.ready():
                    changed = trio.Event()
                    waiters.on_change(changed.set)
                    await changed.wait()
                try:
                    await check_rows(waiters, conn)
                    command = waiters.xread()
                    with trio.move_on_after(waiters.block_ms / 1000 + 10.0) as guard:
                        reply = await conn.execute(*command)
                    if guard.cancelled_caught:  # a half-open socket: no reply to a BLOCK
                        conn.drop()
                        raise ConnectionLost("no reply to a blocking XREAD")
                    waiters.read(reply)
                except PermissionDenied as exc:  # rule 5
                    await trio.sleep(waiters.refused(exc))
                except (ConnectionLost, ServerError) as exc:
                    await trio.sleep(waiters.failed(exc))
