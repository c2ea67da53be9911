"""The claim loop: batch claims sized to the free slots; idle waits on the wake list.

Rule 1: at most ``concurrency`` jobs are held at once. The loop claims as many jobs as
there are free slots in one script call, and hands each to a slot task (``slots.py``: a
long-lived task of the jobs nursery, not a task per job).
Rule 1b: one claim asks for at most half the slots (rounded up; ``cohort``), so that
one half runs while the other half's completions and the next claim are on the server:
the worker and Redis work side by side instead of taking turns (one claim for every slot
made the worker wait for Redis twice per batch, and Redis for the worker).
Rule 1c: the jobs a claim brings start one scheduler tick after its reply: a batch of
completions answered in the same read (Redis writes the replies of one turn of its event
loop together) frees its slots first, so the next claim is sent before these jobs run, and
the server works on it while they do.
Rule 2: when a claim answers fewer jobs than asked, the queue is (for now) empty or
paused: the next claim waits behind a BLPOP on the wake list (``wait_then_claim``: both
go out in one write, on a connection of its own), so it runs on the server the moment a
token arrives, the next scheduled job is due, or the idle cap passes. It never spins.
Rule 3: a claim is never abandoned once sent: its reply is awaited under a shield (a
bounded one), and the jobs it brings are run, or handed back when the consumer stops.
To stop an idle wait at once, the consumer nudges its own wake list.
Rule 4: ``ConnectionLost`` and ``Unavailable`` (``errors.TRANSIENT``) are transient: the loop
backs off and tries again. A claim
whose reply was lost leaves its jobs active on the server: their leases lapse and the
recovery sweep returns them.
"""

from __future__ import annotations

import logging
import uuid

import attrs
import trio

from .. import jobs
from .._jitter import Backoff
from .._redis import validate as v
from .._redis.protocol import RedisConnection
from .._verbs.wake import nudge, wait_then_claim
from ..errors import TRANSIENT, ConnectionLost
from ..jobs import ClaimBatch
from .cancellation import InFlight
from .execution import JobRunner
from .slots import Slots

__all__ = ["Consumer"]

log = logging.getLogger("echomq.worker")

CLAIM_TIMEOUT = 10.0  # a claim with no reply by then is treated as a lost connection
IDLE_CAP = 1.0  # the longest an idle consumer blocks before claiming again
_MIN_IDLE = 0.05  # a due-but-unclaimable job (a paused queue) must not make us spin


@attrs.define(eq=False)
class Consumer:
    conn: RedisConnection
    wake_conn: RedisConnection
    queue: str
    inflight: InFlight
    runner: JobRunner
    jobs_nursery: trio.Nursery
    concurrency: int
    claim_lease_ms: int
    id: str = attrs.field(factory=lambda: uuid.uuid4().hex[:16])
    worker: str | None = None  # written on each claimed row (the holder: explain)
    _free: int = attrs.field(init=False)
    _cohort: int = attrs.field(init=False)  # rule 1b: the most one claim asks for
    slots: Slots = attrs.field(init=False)
    _freed: trio.Event = attrs.field(factory=trio.Event, init=False)
    claims: int = 0
    idle_waits: int = 0
    _idle_until: float | None = attrs.field(default=None, init=False)
    _stopping: bool = attrs.field(default=False, init=False)
    _stopped: trio.Event = attrs.field(factory=trio.Event, init=False)

    def __attrs_post_init__(self) -> None:
        self._free = self.concurrency
        self._cohort = min(v.MAX_COUNT, max(1, (self.concurrency + 1) // 2))
        self.slots = Slots(self.jobs_nursery, self.runner.run)

    def slot_freed(self) -> None:
        """A job finished (settled or handed back): one more slot is free."""
        self._free += 1
        self._freed.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        backoff = Backoff(0.02, 2.0)
        idle_for: float | None = None  # set: the last claim was under-filled
        try:
            while not self._stopping:
                while self._free <= 0 and not self._stopping:
                    self._freed = trio.Event()
                    await self._freed.wait()  # a finished job, or stop()
                if self._stopping:
                    break
                want = min(self._free, self._cohort)
                try:
                    if idle_for is None:
                        batch = await self._claim(want)
                    else:
                        batch = await self._claim_when_woken(want, idle_for)
                except TRANSIENT as exc:
                    delay = backoff.next()
                    log.warning("claim loop: %s; retrying in %.2f s", exc, delay)
                    await trio.sleep(delay)
                    idle_for = None
                    continue
                backoff.reset()
                # rule 1c: the batches of completions answered with this claim free their
                # slots first, so that the next claim goes out before these jobs run
                await trio.lowlevel.cancel_shielded_checkpoint()
                self._take(batch)
                idle_for = self._idle_time(batch) if len(batch.jobs) < want else None
                await trio.lowlevel.checkpoint_if_cancelled()  # the claims are shielded
        finally:
            self._stopped.set()

    def _take(self, batch: ClaimBatch) -> None:
        """Start each claimed job (no checkpoint here: nothing claimed is dropped)."""
        self.claims += 1
        for job in batch.jobs:
            if self._stopping:  # claimed as we stop: straight back to pending
                self.runner.to_release.append((job.id, job.token))
                continue
            self._free -= 1
            held = self.inflight.add(job.id, job.token, self.claim_lease_ms)
            self.runner.counters.claimed += 1
            self.slots.start(job, held)

    @staticmethod
    def _idle_time(batch: ClaimBatch) -> float:
        if batch.next_due_ms is None:
            return IDLE_CAP
        return min(IDLE_CAP, max(batch.next_due_ms / 1000.0, _MIN_IDLE))

    async def _claim(self, want: int) -> ClaimBatch:
        # Shielded: a claim cancelled after it was sent would still run on the server and
        # its jobs would wait for a lease to lapse (and count as stalled). Stopping waits
        # for the reply instead (bounded), and the jobs it brings are run or handed back.
        with trio.CancelScope(shield=True):
            with trio.move_on_after(CLAIM_TIMEOUT):
                return await jobs.claim_batch(
                    self.conn, self.queue, self.claim_lease_ms, count=want, worker=self.worker
                )
        raise ConnectionLost(f"claim on {self.queue!r}: no reply in {CLAIM_TIMEOUT} s")

    async def _claim_when_woken(self, want: int, block: float) -> ClaimBatch:
        self.idle_waits += 1
        self._idle_until = trio.current_time() + block
        try:
            with trio.CancelScope(shield=True):  # see _claim; stop() nudges it awake
                with trio.move_on_after(block + CLAIM_TIMEOUT):
                    return await wait_then_claim(
                        self.wake_conn,
                        self.conn,
                        self.queue,
                        self.id,
                        block,
                        self.claim_lease_ms,
                        want,
                        self.worker,
                    )
            # No reply at all: drop the socket, so a claim still queued behind the
            # BLPOP is discarded by the server rather than run for nobody.
            self.wake_conn.drop()
            raise ConnectionLost(f"idle claim on {self.queue!r}: no reply")
        finally:
            self._idle_until = None

    async def stop(self) -> None:
        """Stop claiming: an idle wait is woken at once; jobs it claims are handed back.

        A loop waiting for a free slot (every slot busy) is woken too: the grace period
        must start now, not when a job happens to finish.
        """
        self._stopping = True
        self._freed.set()
        if self._idle_until is not None:
            try:
                await nudge(self.conn, self.queue, self.id)
            except TRANSIENT as exc:
                log.warning("stop: could not wake the idle claim (%s); it ends by itself", exc)
        with trio.move_on_after(CLAIM_TIMEOUT):
            await self._stopped.wait()

    async def scheduled(self, due_in: float | None) -> None:
        """A job was scheduled (or retried later): wake our idle wait if it is due sooner.

        The scripts push wake tokens only for ready work; a wait that started before
        this job was scheduled would otherwise sleep past its due time (up to the cap).
        """
        until = self._idle_until
        if until is None:
            return  # busy: the next claim reads the schedule again
        if due_in is not None and trio.current_time() + due_in >= until:
            return
        await nudge(self.conn, self.queue, self.id)
