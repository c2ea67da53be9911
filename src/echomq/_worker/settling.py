"""Completions are settled in batches: one ``complete_many`` per tick, not one call per job.

Rule 1 (one call per tick): the first job of a scheduler tick to finish becomes the
batch's leader: it waits one (shielded) checkpoint, so that every job finishing in the
same tick joins its batch, then records the batch with one ``complete_many`` script call
per ``MAX_BATCH`` (100) jobs (and per ``MAX_BATCH_BYTES`` of results), each job fenced by
its own token, one answer per job. Jobs that finish while a batch is in flight start the
next one: several batches may be in flight at once.
Rule 1b (the worker's way): with ``spawn`` set, the batch is recorded by a task of its
own, started by its first job, instead: no job waits for its batch, so a slot task runs
the next job at once (``slots.py`` rule 1); that task runs one tick later, as the leader
resumed after its checkpoint.
Rule 2 (nothing acknowledged before Redis has it): a job counts as completed, leaves the
held map and frees its slot only once the server answered for it. A job answered
stale / not active / gone was taken over: counted lost, logged, never retried.
Rule 3 (the same guarantees as one job alone, ``execution.py`` rule 2): the call runs
under a shield bounded by ``settle_timeout``; ``ConnectionLost`` and ``Unavailable``
(``errors.TRANSIENT``: a slot mid-reshard, a failover) are retried with backoff within that
bound (completing again with the same token is idempotent: already completed
answers ok). Any other error (a server error, a result the verb refuses) settles each job
of the batch alone, through the single-job path and its fallback (the job failed dead
with the reason). If the bound passes, the leases lapse and recovery returns the jobs.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import attrs
import trio

from .._jitter import Backoff
from .._scripts import validate as v
from .._scripts.calls import Executor
from .._scripts.replies import ExtendResult
from ..config import MAX_BATCH_BYTES
from ..errors import TRANSIENT, EchoMQError, JobGone, NotActive, ScriptError, StaleToken
from ..jobs.lifecycle import complete_held
from .cancellation import Held

__all__ = ["Completions", "Item"]

log = logging.getLogger("echomq.worker")

Item = tuple[Held, bytes, bool]  # the held job, its result, whether it was cancelled
CHUNK = v.MAX_BATCH  # jobs per complete_many call (the verb's cap)
_REFUSALS: dict[ExtendResult, type[EchoMQError]] = {
    ExtendResult.STALE: StaleToken,
    ExtendResult.NOT_ACTIVE: NotActive,
    ExtendResult.GONE: JobGone,
}


def _chunks(batch: list[Item]) -> list[list[Item]]:
    """``batch`` cut into calls: at most ``CHUNK`` jobs and ``MAX_BATCH_BYTES`` of results
    each (a result alone bigger than that is refused by the verb: that job then settles
    alone, and fails with the reason)."""
    chunks: list[list[Item]] = [[]]
    size = 0
    for item in batch:
        current = chunks[-1]
        if current and (len(current) == CHUNK or size + len(item[1]) > MAX_BATCH_BYTES):
            current = []
            chunks.append(current)
            size = 0
        current.append(item)
        size += len(item[1])
    return chunks


@attrs.define(eq=False)
class Completions:
    """The batches of completed jobs of one worker (see the module's rules)."""

    conn: Executor
    queue: str
    settle_timeout: float
    # counts the completions the server recorded (cancelled or not), one call per script
    # call; lost ones go to ``lost``
    recorded: Callable[[list[Item]], None]
    lost: Callable[[Held], None]
    # a batch whose outcomes the server has (or that recovery owns now): its jobs leave the
    # held map and free their slots; those not in the set were not settled (hand them back)
    finish: Callable[[list[Item], set[Held]], None]
    # the single-job path, with its fallback (execution.JobRunner._settle)
    settle_alone: Callable[[Held, bytes, bool], Awaitable[bool]]
    # rule 1b: starts a batch's own task (``Slots.spawn``); None: the first job leads
    spawn: Callable[[Callable[[list[Item]], Awaitable[None]], list[Item]], None] | None = None
    batches: int = 0  # complete_many calls made
    _collecting: list[Item] | None = attrs.field(default=None, init=False)

    def join(self, held: Held, result: bytes, cancelled: bool) -> bool:
        """Join the batch of this tick if one is collecting (True: its leader finishes
        ``held``); False: there is none, :meth:`add` starts one. (A plain call: most jobs
        of a tick join, and need no coroutine for it.)"""
        batch = self._collecting
        if batch is None:
            if self.spawn is None:
                return False
            batch = self._collecting = []
            self.spawn(self._lead, batch)  # rule 1b
        batch.append((held, result, cancelled))
        return True

    async def _lead(self, batch: list[Item]) -> None:
        """Rule 1b: a batch's own task, started by its first job, so that job (and its
        slot task) need not wait for it. It runs one scheduler tick later: every job
        finishing in the tick its first job did has joined."""
        if self._collecting is batch:
            self._collecting = None
        settled: set[Held] = set()
        try:
            await self._record(batch, settled)  # (shielded: no cancellation lands here)
        finally:  # (not settled: handed back, or left to recovery)
            self.finish(batch, settled)

    async def add(self, held: Held, result: bytes, cancelled: bool) -> None:
        """Record ``held``'s completion; the batch's leader returns once it is recorded,
        a job that joined a batch returns at once (the leader finishes it)."""
        if self.join(held, result, cancelled):
            return
        batch = self._collecting = [(held, result, cancelled)]
        settled: set[Held] = set()
        try:
            try:
                # every job finishing in this tick joins (no cancellation lands here: the
                # batch's jobs are finished below whatever happens)
                await trio.lowlevel.cancel_shielded_checkpoint()
            finally:
                self._collecting = None
            await self._record(batch, settled)
        finally:  # (not settled: handed back, or left to recovery)
            self.finish(batch, settled)

    async def _record(self, batch: list[Item], settled: set[Held]) -> None:
        with trio.CancelScope(shield=True):
            with trio.move_on_after(self.settle_timeout):
                for chunk in _chunks(batch):
                    await self._chunk(chunk, settled)
            if len(settled) < len(batch):
                log.error(
                    "%d job(s) could not be settled within %.1f s; their leases will "
                    "lapse and recovery returns them",
                    len(batch) - len(settled),
                    self.settle_timeout,
                )
                settled.update(held for held, _, _ in batch)  # recovery owns them now

    async def _chunk(self, chunk: list[Item], settled: set[Held]) -> None:
        backoff = Backoff(0.02, 1.0)
        while True:
            try:
                self.batches += 1
                answers = await complete_held(
                    self.conn,
                    self.queue,
                    [held.id for held, _, _ in chunk],
                    [held.token for held, _, _ in chunk],
                    [result for _, result, _ in chunk],
                )
                break
            except TRANSIENT as exc:
                log.warning("settling %d job(s) failed (%s); retrying", len(chunk), exc)
                await backoff.sleep()
            except Exception as exc:  # not transient: each job alone, with its fallback
                log.warning(
                    "settling %d job(s) together failed (%r); settling each alone", len(chunk), exc
                )
                async with trio.open_nursery() as nursery:
                    for item in chunk:
                        nursery.start_soon(self._alone, item, settled)
                return
        if len(answers) != len(chunk):
            raise ValueError(f"complete_many answered {len(answers)} of {len(chunk)} jobs")
        recorded = chunk
        if answers.count(ExtendResult.OK) < len(chunk):  # some were taken over
            recorded = []
            for item, answer in zip(chunk, answers, strict=True):
                if answer is ExtendResult.OK:
                    recorded.append(item)
                    continue
                held = item[0]
                self.lost(held)
                refusal = _REFUSALS.get(answer, ScriptError)(f"complete {held.id}: {answer}")
                log.warning(
                    "job %s: settling refused (%r); a newer holder owns it", held.id, refusal
                )
        self.recorded(recorded)
        settled.update([held for held, _, _ in chunk])

    async def _alone(self, item: Item, settled: set[Held]) -> None:
        held, result, cancelled = item
        if await self.settle_alone(held, result, cancelled):
            settled.add(held)
