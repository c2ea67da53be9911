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
The builders and readers (no I/O) are in ``result_reads.py``, shared
with the blocking producer (``echomq.sync``), which waits with its own ``XREAD``; the
waiters' bookkeeping (no I/O) is in ``result_waiters.py``, shared with the asyncio feed.
"""

from __future__ import annotations

import logging

import attrs
import trio

from ._client.result_reads import (
    Outcome,
    probe_commands,
    read_probe,
    read_stream_entries,
    row_outcome,
    xread_command,
)
from ._client.result_waiters import Waiters
from ._jitter import Backoff
from ._model.completion import FinishState
from ._scripts.keyspace import keyspace
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

log = logging.getLogger("echomq.results")

GONE_CHECK = 30.0  # seconds between the reader's checks that waited-on rows still exist
BLOCK = 5.0  # seconds one XREAD blocks
BATCH = 1000  # entries one XREAD reads


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
        self._waiters = Waiters(self.queue, trio.current_time, trio.Event)

    @property
    def waiting(self) -> int:
        """Waiters now."""
        return self._waiters.count

    async def wait(self, conn: RedisConnection, job_id: str) -> Outcome | None:
        """The job's outcome: at once when its row records one, else when its completions
        entry is written. None when the job has no row (past its retention, or removed).

        ``conn`` (a shared connection) reads the row; the feed's own connection blocks.

        Raises:
            InvalidKey: before any I/O. ConnectionLost, ServerError: the row could not be
                read (nothing waits then). PermissionDenied: the reads were refused (rule 5).
        """
        keyspace(self.queue).job(job_id)  # the id's gate, before any I/O
        waiter = self._waiters.add(job_id)
        try:
            probe = read_probe(
                job_id, await conn.execute_pipeline(probe_commands(self.queue, job_id))
            )
            if probe.info is None:
                return None
            outcome = row_outcome(probe.info)
            if outcome is not None:
                return outcome
            self._waiters.start(waiter, probe.after)
            await waiter.done.wait()
            if waiter.error is not None:  # rule 5: a refusal of the reads
                raise waiter.error
            return waiter.outcome
        finally:
            self._waiters.remove(waiter)

    async def run(
        self, *, task_status: trio.TaskStatus[ResultFeed] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Read the stream for as long as the nursery runs (idle while nobody waits)."""
        stats, waiters = self.statistics, self._waiters
        backoff = Backoff(0.05, 5.0)
        async with connect(self.url) as conn:
            task_status.started(self)
            position: str | None = None
            recheck = False
            refused: str | None = None  # the refusal last logged (rule 5)
            next_check = trio.current_time() + self.gone_check
            while True:
                if not waiters.by_job:
                    position = None  # nobody waits: start afresh after the next waiters
                while not waiters.ready():
                    await waiters.renew().wait()
                position = waiters.position(position)
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
                        stats.delivered += waiters.dispatch(stream_id, fields)
                    if trio.current_time() >= next_check:
                        await self._check_rows(conn, everyone=False)
                        next_check = trio.current_time() + self.gone_check
                    backoff.reset()
                except PermissionDenied as exc:  # rule 5
                    stats.redis_errors += 1
                    if str(exc) != refused:
                        refused = str(exc)
                        log.error("results of %s: %s", self.queue, exc)
                    waiters.fail_all(exc)
                    recheck = True
                    await trio.sleep(backoff.next())
                except (ConnectionLost, ServerError) as exc:
                    stats.redis_errors += 1
                    recheck = True
                    delay = backoff.next()
                    log.warning(
                        "results of %s: %s; reading again in %.2f s", self.queue, exc, delay
                    )
                    await trio.sleep(delay)

    async def _check_rows(self, conn: RedisConnection, *, everyone: bool) -> None:
        """Re-read the state of the waited-on rows (all of them after a reconnect, else
        those waiting longer than ``gone_check``); a gone or finished row answers them."""
        waiters = self._waiters
        ids = waiters.due(everyone=everyone, gone_check=self.gone_check)
        if not ids:
            return
        self.statistics.row_checks += 1
        states = await conn.execute_pipeline(waiters.state_commands(ids))
        look = waiters.settled(ids, states)
        if look:
            waiters.answer_rows(look, await conn.execute_pipeline(waiters.row_commands(look)))
