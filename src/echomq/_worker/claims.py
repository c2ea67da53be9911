"""The claim loop: batch claims sized to the free slots; idle waits on the wake list.

Rule 1: at most ``concurrency`` jobs run (or settle) at once (``room.py``), and at most
``prefetch`` more wait for a slot (rule 5). The loop claims as many jobs as there is room
for in one script call, and hands each to the slot pool (``pool.py``).
Rule 1b: one claim asks for at most half the slots (rounded up; ``Room.cohort``), so that
one half runs while the other half's completions and the next claim are on the server:
the worker and Redis work side by side instead of taking turns (one claim for every slot
makes the worker wait for Redis twice per batch, and Redis for the worker).
Rule 1c: the jobs a claim brings start one scheduler tick after its reply: a batch of
completions answered in the same read (Redis writes the replies of one turn of its event
loop together) frees its slots first, so the next claim is sent before these jobs run, and
the server works on it while they do.
Rule 1d: busy claims go out on the wake connection too (the claim loop is its only user,
one call at a time), so each is written the moment it is made, by the claim loop itself,
and answered alone: on the command connection it would wait for the writer task (behind
the jobs of the tick) and come back only with the batch of completions read with it.
Rule 2: when a claim answers fewer jobs than asked, the queue is (for now) empty or
paused: the next claim waits behind a BLPOP on the wake list (``wait_then_claim``: both
go out in one write, on a connection of its own), so it runs on the server the moment a
token arrives, the next scheduled job is due, or the idle cap passes. It never spins.
Rule 3: a claim is never abandoned once sent: its reply is awaited under a shield (a
bounded one), and the jobs it brings are run, or handed back when the loop stops.
To stop an idle wait at once, the loop nudges its own wake list.
Rule 4: ``ConnectionLost`` and ``Unavailable`` (``errors.TRANSIENT``) are transient: the loop
backs off and tries again. A claim whose reply was lost leaves its jobs active on the
server: their leases lapse and the recovery sweep returns them.
Rule 5 (prefetch): while the slots turn over fast (``Room.fast``), the loop claims up to
``prefetch`` jobs more than there are free slots, up to ``concurrency`` (at most 250) in
one claim (bigger claims: fewer script calls and writes per job; rule 1b's halves are for
a worker that does not prefetch): they wait, claimed, in ``_ready`` and each takes the
next slot that frees, so the worker always has a batch to run while Redis settles the last
one and claims the next (Celery's prefetch). A waiting job is held like a running one (in
the held-job table: the lease keeper renews it, a cancel request or a lost lease reaches
it; a job that lost its lease while waiting is never run). Stopping hands the waiting
jobs back at once (``give_back``; the worker releases them, fenced, before the grace
starts); a worker that fails starts none once its jobs nursery is cancelled, and hands
them back uncounted (they never ran: not what failed it). Slow jobs never prefetch:
a prefetched job would wait behind them while another worker idles.
Rule 6 (several queues; ``queues.py``): one loop claims for every queue a worker serves,
into the same slots, held-job table and prefetch. Each pass asks the turn policy
(``QueueTurns.share``: strict order or weights, per-queue caps) whom to ask for how many,
and claims from each in turn, each queue on a wake connection of its own (its master's,
on a cluster). A queue that answers fewer than asked rests: it is not asked again until
its watcher (a ``BLPOP`` on its wake list and this loop's own list there, for its idle
time, claiming nothing) returns, so an empty or paused queue costs one blocking call,
not a claim per pass. With every queue resting the loop waits for a watcher to return
(or a slot to free, for a capped queue). A claim that fails (rule 4) sets its queue aside
for its own back-off's delay; the other queues are asked meanwhile. A worker of one queue
keeps rules 1-5 as they are (its idle claim goes out behind its ``BLPOP``, in one write).
"""

from __future__ import annotations

import logging
import uuid
from collections import deque
from time import perf_counter

import attrs
import trio

from .. import jobs
from .._jitter import Backoff
from .._model.job import Claimed
from .._scripts import validate as v
from .._wire.interface import RedisConnection
from ..errors import TRANSIENT, ConnectionLost
from ..jobs import ClaimBatch
from ..jobs.wake import nudge, wait_for_work, wait_then_claim
from .cancellation import Held, InFlight
from .pool import SlotPool
from .queues import QueueTurns
from .room import Room
from .tally import Counters

__all__ = ["ClaimLoop", "Source"]

log = logging.getLogger("echomq.worker")

CLAIM_TIMEOUT = 10.0  # a claim with no reply by then is treated as a lost connection
IDLE_CAP = 1.0  # the longest an idle loop blocks before claiming again
_MIN_IDLE = 0.05  # a due-but-unclaimable job (a paused queue) must not make us spin


@attrs.define(eq=False)
class Source:
    """One queue of a worker serving several (rule 6)."""

    name: str
    wake_conn: RedisConnection  # its claims and its watcher's BLPOP, one at a time
    claims: int = 0  # claim calls made to it
    resting: bool = False  # it answered short: its watcher waits for work
    until: float | None = None  # while resting: when its watcher's wait ends (trio time)
    # rule 4 for this queue alone: its claims' back-off
    backoff: Backoff = attrs.field(factory=lambda: Backoff(0.02, 2.0))


@attrs.define(eq=False)
class ClaimLoop:
    conn: RedisConnection
    wake_conn: RedisConnection
    queue: str
    inflight: InFlight
    room: Room
    pool: SlotPool
    counters: Counters
    claim_lease_ms: int
    id: str = attrs.field(factory=lambda: uuid.uuid4().hex[:16])  # its own wake list's
    worker: str | None = None  # written on each claimed row (the holder: explain)
    prefetch: int = 0  # rule 5: the most claimed jobs waiting for a slot (0: none)
    # rule 6: the queues of a worker serving several (the first is ``queue``), and whom
    # to ask; empty: one queue (``queue``, on ``wake_conn``)
    sources: tuple[Source, ...] = ()
    turns: QueueTurns | None = None
    _ready: deque[tuple[Claimed, Held]] = attrs.field(factory=deque, init=False)  # rule 5
    _batch: int = attrs.field(init=False)  # rule 5: the most one claim asks for
    claims: int = 0
    idle_waits: int = 0
    _idle_until: float | None = attrs.field(default=None, init=False)
    _stopping: bool = attrs.field(default=False, init=False)
    _stopped: trio.Event = attrs.field(factory=trio.Event, init=False)

    def __attrs_post_init__(self) -> None:
        self._batch = min(v.MAX_COUNT, self.room.concurrency)
        if self.sources and self.turns is None:
            self.turns = QueueTurns(len(self.sources))

    @property
    def prefetched(self) -> int:
        """Claimed jobs waiting for a slot (rule 5)."""
        return len(self._ready)

    def _room(self) -> tuple[int, int]:
        """How many jobs the next claim may ask for, and the most one claim asks for: the
        free slots not promised to a prefetched job, at most a cohort (rule 1b); while the
        slots turn over fast (rule 5), the prefetch too, and up to every slot at once."""
        room = self.room
        free = room.available - len(self._ready)
        if self.prefetch and room.fast:
            return free + self.prefetch, self._batch
        return free, room.cohort

    async def _start_prefetched(self) -> None:
        """Rule 5: start prefetched jobs in freed slots. A task of its own (not the
        finished batch's): it runs in the tick the claim loop wakes for the same freed
        slots, and the slot task it wakes in the next, so the next claim goes out before
        these jobs run (as rule 1c)."""
        room, ready, pool = self.room, self._ready, self.pool
        failing = pool.nursery.cancel_scope  # cancelled: a job task failed (a crash)
        while True:
            while ready and room.available > 0 and not failing.cancel_called:
                room.take(1)
                job, held = ready.popleft()
                held.waiting = False
                pool.start(job, held)
            await room.changed()

    def give_back(self, *, unstarted: bool = False) -> None:
        """Move the prefetched jobs (never started) out of the held-job table onto its
        hand-back list (rule 5): stopping, or the worker failed. ``unstarted``: the jobs
        nursery is gone: the jobs given a slot that no slot task started go back too."""
        gone = [held for _, held in self._ready]
        self._ready.clear()
        if unstarted:
            gone += [held for _, held in self.pool.unstarted()]
        self.inflight.give_back(gone)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._start_prefetched)
            task_status.started()
            try:
                if self.sources:
                    await self._claim_many(nursery)
                else:
                    await self._claim_loop()
            finally:
                self._stopped.set()
                # (rule 6: a watcher's BLPOP is shielded: it ends at stop's nudge, or its time)
                nursery.cancel_scope.cancel()

    async def _claim_loop(self) -> None:
        backoff = Backoff(0.02, 2.0)
        idle_for: float | None = None  # set: the last claim was under-filled
        try:
            while not self._stopping:
                while (room := self._room())[0] <= 0 and not self._stopping:
                    await self.room.changed()  # a finished job, or stop()
                if self._stopping:
                    break
                want = min(*room)
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
                self._take(batch, self.queue)
                idle_for = self._idle_time(batch) if len(batch.jobs) < want else None
                await trio.lowlevel.checkpoint_if_cancelled()  # the claims are shielded
        finally:
            self._stopped.set()

    async def _claim_many(self, nursery: trio.Nursery) -> None:
        """Rule 6: one pass asks the queues the turn policy names, each in turn."""
        sources, turns, inflight = self.sources, self.turns, self.inflight
        assert turns is not None
        while not self._stopping:
            while (room := self._room())[0] <= 0 and not self._stopping:
                await self.room.changed()  # a finished job, or stop()
            if self._stopping:
                break
            free, most = room  # a pass deals at most what one claim may ask for
            plan = turns.share(
                min(free, most),
                [not s.resting for s in sources],
                [inflight.held_in(s.name) for s in sources],
            )
            if not plan:  # every queue resting (or at its cap): a watcher wakes the room
                await self.room.changed()
                continue
            for index, count in plan:
                if self._stopping:
                    break
                source = sources[index]
                try:
                    batch = await self._claim(count, source)
                except TRANSIENT as exc:  # rule 4, for this queue alone: the others go on
                    delay = source.backoff.next()
                    log.warning("claim loop (%s): %s; retrying in %.2f s", source.name, exc, delay)
                    self._rest(source, delay, nursery, failed=True)
                    continue
                source.backoff.reset()
                await trio.lowlevel.cancel_shielded_checkpoint()  # rule 1c
                self._take(batch, source.name)
                if len(batch.jobs) < count:
                    self._rest(source, self._idle_time(batch), nursery)
                await trio.lowlevel.checkpoint_if_cancelled()  # the claims are shielded

    def _rest(
        self, source: Source, block: float, nursery: trio.Nursery, *, failed: bool = False
    ) -> None:
        """Rule 6: ``source`` answered short: closed to claims until its watcher returns.
        ``failed``: its claim failed (rule 4): it sits out ``block`` seconds instead."""
        source.resting = True
        source.until = None if failed else trio.current_time() + block
        if failed:
            nursery.start_soon(self._sit_out, source, block)
            return
        self.idle_waits += 1
        nursery.start_soon(self._watch, source, block)

    async def _sit_out(self, source: Source, delay: float) -> None:
        try:
            await trio.sleep(delay)
        finally:
            source.resting = False
            self.room.wake()

    async def _watch(self, source: Source, block: float) -> None:
        try:
            with trio.CancelScope(shield=True):  # stop() nudges it awake
                with trio.move_on_after(block + CLAIM_TIMEOUT) as bound:
                    await wait_for_work(source.wake_conn, source.name, self.id, block)
                if bound.cancelled_caught:  # no reply: a BLPOP left on the server holds
                    source.wake_conn.drop()  # the socket; drop it (the next call redials)
        except TRANSIENT as exc:
            log.warning("claim loop (%s): waiting for work: %s", source.name, exc)
        finally:
            source.resting = False
            source.until = None
            self.room.wake()

    def _take(self, batch: ClaimBatch, queue: str) -> None:
        """Start each claimed job (no checkpoint here: nothing claimed is dropped)."""
        self.claims += 1
        jobs = batch.jobs
        if self._stopping:  # claimed as we stop: straight back to pending
            self.inflight.hand_back.extend((queue, job.id, job.token) for job in jobs)
            return
        add, lease = self.inflight.add, self.claim_lease_ms
        room, start, ready = self.room, self.pool.start, self._ready
        # the first jobs take the free slots; the rest are prefetched (rule 5): each takes
        # the next slot that frees (after any job prefetched before)
        starting = 0 if ready else max(0, min(room.available, len(jobs)))
        room.take(starting)
        now = perf_counter()
        for job in jobs[:starting]:
            held = add(job.id, job.token, lease, queue)
            held.claimed_at = now
            start(job, held)
        for job in jobs[starting:]:
            held = add(job.id, job.token, lease, queue)
            held.claimed_at = now
            held.waiting = True
            ready.append((job, held))
        if ready and room.available > 0:
            room.wake()
        self.counters.claimed += len(jobs)

    @staticmethod
    def _idle_time(batch: ClaimBatch) -> float:
        if batch.next_due_ms is None:
            return IDLE_CAP
        return min(IDLE_CAP, max(batch.next_due_ms / 1000.0, _MIN_IDLE))

    async def _claim(self, want: int, source: Source | None = None) -> ClaimBatch:
        # Shielded: a claim cancelled after it was sent would still run on the server and
        # its jobs would wait for a lease to lapse (and count as stalled). Stopping waits
        # for the reply instead (bounded), and the jobs it brings are run or handed back.
        conn, queue = self.wake_conn, self.queue
        if source is not None:
            conn, queue = source.wake_conn, source.name
            source.claims += 1
        with trio.CancelScope(shield=True):
            with trio.move_on_after(CLAIM_TIMEOUT):
                return await jobs.claim_batch(  # rule 1d: on the wake connection
                    conn, queue, self.claim_lease_ms, count=want, worker=self.worker
                )
        raise ConnectionLost(f"claim on {queue!r}: no reply in {CLAIM_TIMEOUT} s")

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
        self.room.wake()
        self.give_back()  # rule 5: the worker releases them before the grace starts
        resting = [s.name for s in self.sources if s.resting]  # rule 6: their watchers
        if self._idle_until is not None:
            resting.append(self.queue)
        for queue in resting:
            try:
                await nudge(self.conn, queue, self.id)
            except TRANSIENT as exc:
                log.warning("stop: could not wake the idle claim (%s); it ends by itself", exc)
        with trio.move_on_after(CLAIM_TIMEOUT):
            await self._stopped.wait()

    async def scheduled(self, due_in: float | None, queue: str | None = None) -> None:
        """A job was scheduled (or retried later) on ``queue`` (default: the loop's
        first): wake our idle wait on it if it is due sooner.

        The scripts push wake tokens only for ready work; a wait that started before
        this job was scheduled would otherwise sleep past its due time (up to the cap).
        """
        name = self.queue if queue is None else queue
        if self.sources:
            until = next((s.until for s in self.sources if s.name == name), None)
        else:
            until = self._idle_until
        if until is None:
            return  # busy: the next claim reads the schedule again
        if due_in is not None and trio.current_time() + due_in >= until:
            return
        await nudge(self.conn, name, self.id)
