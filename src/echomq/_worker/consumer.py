"""The claim loop: batch claims sized to the free slots; idle waits on the wake list.

Rule 1: at most ``concurrency`` jobs are held at once. The loop claims as many jobs as
there are free slots in one script call, and starts each in the jobs nursery.
Rule 2: when a claim answers fewer jobs than asked, the queue is (for now) empty or
paused: the loop blocks on the wake list (BLPOP, on a connection of its own) until a
token arrives, the next scheduled job is due, or the idle cap passes. It never spins.
Rule 3: ``ConnectionLost`` is transient: the loop backs off and tries again. A claim
whose reply was lost leaves its jobs active on the server: their leases lapse and the
recovery sweep returns them.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs
import trio

from .. import jobs
from .._redis import validate as v
from .._verbs.wake import push_wake, wait_wake
from ..errors import ConnectionLost
from ..jobs import ClaimBatch
from .cancellation import InFlight
from .execution import JobRunner

__all__ = ["Consumer"]

log = logging.getLogger("echomq.worker")

CLAIM_TIMEOUT = 10.0  # a claim with no reply by then is treated as a lost connection
IDLE_CAP = 1.0  # the longest an idle consumer blocks before claiming again
_MIN_IDLE = 0.05  # a due-but-unclaimable job (a paused queue) must not make us spin


@attrs.define(eq=False)
class Consumer:
    conn: Any
    wake_conn: Any
    queue: str
    inflight: InFlight
    runner: JobRunner
    jobs_nursery: trio.Nursery
    concurrency: int
    claim_lease_ms: int
    _free: int = attrs.field(init=False)
    _freed: trio.Event = attrs.field(factory=trio.Event, init=False)
    claims: int = 0
    idle_waits: int = 0
    _idle_until: float | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        self._free = self.concurrency

    def slot_freed(self) -> None:
        """A job finished (settled or handed back): one more slot is free."""
        self._free += 1
        self._freed.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        delay = 0.02
        while True:
            while self._free <= 0:
                self._freed = trio.Event()
                await self._freed.wait()
            want = min(self._free, v.MAX_COUNT)
            try:
                batch = await self._claim(want)
                claimed = batch.jobs
                self.claims += 1
                for job in claimed:
                    self._free -= 1
                    held = self.inflight.add(job.id, job.token, self.claim_lease_ms)
                    self.runner.counters.claimed += 1
                    self.jobs_nursery.start_soon(self.runner.run, job, held, name=f"job {job.id}")
                if len(claimed) < want:
                    await self._idle(batch.next_due_ms)
                delay = 0.02
            except ConnectionLost as exc:
                log.warning("claim loop: %s; retrying in %.2f s", exc, delay)
                await trio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def _claim(self, want: int) -> ClaimBatch:
        # Shielded: a claim cancelled after it was sent would still run on the server and
        # its jobs would wait for a lease to lapse (and count as stalled). Stopping waits
        # for the reply instead (bounded), and the jobs it brings are run or handed back.
        with trio.CancelScope(shield=True):
            with trio.move_on_after(CLAIM_TIMEOUT):
                return await jobs.claim_batch(
                    self.conn, self.queue, self.claim_lease_ms, count=want
                )
        raise ConnectionLost(f"claim on {self.queue!r}: no reply in {CLAIM_TIMEOUT} s")

    async def _idle(self, next_due_ms: int | None) -> None:
        self.idle_waits += 1
        due = None if next_due_ms is None else next_due_ms / 1000.0
        timeout = IDLE_CAP if due is None else min(IDLE_CAP, max(due, _MIN_IDLE))
        self._idle_until = trio.current_time() + timeout
        try:
            await wait_wake(self.wake_conn, self.queue, timeout)
        finally:
            self._idle_until = None

    async def scheduled(self, due_in: float | None) -> None:
        """A job was scheduled (or retried later): wake our idle wait if it is due sooner.

        The scripts push wake tokens only for ready work; a BLPOP that started before
        this job was scheduled would otherwise sleep past its due time (up to the cap).
        """
        until = self._idle_until
        if until is None:
            return  # busy: the next idle wait reads the schedule again
        if due_in is not None and trio.current_time() + due_in >= until:
            return
        await push_wake(self.conn, self.queue)
