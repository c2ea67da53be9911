"""Settling: a run's outcome recorded in Redis, counted, and its slot freed.

Rule 1 (one direction): the runner hands every outcome to :meth:`Settler.take`; the
settler records it, counts it, takes the job out of the held-job table (handing it back if
it was not settled) and frees its slot (``room.Room.free``), which is what the claim loop
waits on. Nothing here calls back into the runner.
Rule 2 (not settled here): a fenced job (Redis settled it cancelled) counts as cancelled,
a job whose lease was lost counts as lost; neither is written. A job with no outcome (a
shutdown past grace, the worker cancelled from outside) is handed back to pending.
Rule 3 (completions in batches): the completions of one scheduler tick go to Redis in one
``complete_many`` call per queue and ``MAX_HELD`` (250) jobs (and per ``MAX_BATCH_BYTES`` of
results), each job fenced by its own token, one answer per job. The first completion of a
tick starts the batch's own task (in the jobs nursery, in the context the settler was
made in, not the job's), which runs one tick later: every job finishing in the same tick
has joined by then, and no job waits for its batch, so its slot task runs the next job at
once. Jobs that finish while a batch is in flight start the next one.
Rule 4 (nothing acknowledged before Redis has it): a job counts as completed, leaves the
held-job table and frees its slot only once the server answered for it. A job answered
stale / not active / gone was taken over: counted lost, logged, never retried.
Rule 5 (one job alone): failures, retries, back-offs (``RateLimited``: ``rate_limited``,
no failure counted, not in the tally) and completions with a traceback to log are
settled one job at a time (``fail``, ``complete``: rare on a busy queue).
Rule 6 (bounded, retried, never forced): every write runs under a shield bounded by
``settle_timeout``; ``ConnectionLost`` and ``Unavailable`` (``errors.TRANSIENT``: a slot
mid-reshard, a failover slower than ``connect_timeout``) are retried with backoff within
that bound (``complete`` again with the same token is idempotent; a ``fail`` that landed
answers ``NotActive``/``StaleToken`` the second time, which also means "done"). A refusal
means the lease was lost: logged, never retried, never forced. Any other error (a server
error, a result the verb refuses) fails the job dead instead, with that reason (a batch:
each of its jobs settles alone, through rule 5); if even that is refused, the lease
lapses and recovery counts the job as stalled. If the bound passes, the leases lapse and
recovery returns the jobs.
Rule 7 (hooks; hooks.py): once an outcome is counted (the server took it, or a fence
settled it cancelled), its outcome hooks are called: plain ones inline, async ones in a
task of their own in the jobs nursery, bounded by the hooks' timeout. A lost job has none.
Rule 8 (several queues): one settler serves every queue a worker serves; each job is
written to its own queue (``Held.queue``), counted in its queue's tally, and its queue's
hooks are called (one connection reaches every queue: one server, or a cluster routing
each queue's keys to its master).
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Awaitable, Callable
from typing import cast

import attrs
import trio

from .. import jobs
from .._jitter import Backoff
from .._model.cancel import cancelled_result
from .._model.text import error_text
from .._scripts import validate as v
from .._scripts.calls import Executor
from .._scripts.replies import CompleteResult
from ..config import MAX_BATCH_BYTES
from ..errors import (
    TRANSIENT,
    EchoMQError,
    JobCancelled,
    JobGone,
    NotActive,
    ScriptError,
    StaleToken,
)
from ..jobs.lifecycle import complete_held
from .cancellation import Held, InFlight, Stop
from .hooks import Hooks, JobOutcome, Settled
from .outcome import REASON_ROOM, Outcome, Settlement, fallback
from .room import Room
from .tally import Counters, Tally

__all__ = ["Item", "Settler"]

log = logging.getLogger("echomq.worker")

Item = tuple[Held, bytes, bool]  # the held job, its result, whether it was cancelled
CHUNK = v.MAX_HELD  # jobs per complete_many call (the verb's cap)
_LOST = (StaleToken, NotActive, JobGone)
_REFUSALS: dict[CompleteResult, type[EchoMQError]] = {
    CompleteResult.STALE: StaleToken,
    CompleteResult.NOT_ACTIVE: NotActive,
    CompleteResult.GONE: JobGone,
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
class Settler:
    """Records, counts and finishes the outcomes of one worker's jobs (the module's rules)."""

    conn: Executor  # every queue's keys (rule 8)
    inflight: InFlight
    room: Room
    nursery: trio.Nursery  # the jobs nursery: the batches' own tasks (rule 3)
    settle_timeout: float = 10.0
    counters: Counters = attrs.field(factory=Counters)
    # per queue, per task: outcomes, run times (tally.py)
    tallies: dict[str, Tally] = attrs.field(factory=dict)
    batches: int = 0  # complete_many calls made
    hooks: dict[str, Hooks] = attrs.field(factory=dict)  # each queue's (rule 7)
    _collecting: dict[str, list[Item]] = attrs.field(factory=dict, init=False)
    # rule 3: the context the batches' tasks are made in
    _base: contextvars.Context = attrs.field(factory=contextvars.copy_context, init=False)

    def take(self, held: Held, outcome: Outcome) -> Settlement | None:
        """Take ``held``'s outcome (no checkpoint here). Answers the settlement the caller
        then awaits :meth:`settle` for (rule 5); None: done here, or joined this tick's
        batch of completions (rule 3)."""
        stop = held.stop
        if stop is None and type(outcome) is bytes:  # completed: its encoded result
            held.settling = True  # the lease keeper leaves it alone
            self._join(held, outcome, False)  # (the common case)
            return None
        if stop is Stop.FENCED:
            self._count(held, "cancelled")
            log.warning(
                "job %s was fenced (its cancel grace ran out): settled cancelled; "
                "its own outcome is not used",
                held.id,
            )
        elif stop is Stop.LOST:
            self._count(held, "lost")
            log.warning("job %s lost its lease; its outcome is not settled", held.id)
        elif stop is Stop.SLEPT:  # a durable sleep, a wait for children (docs/steps.md)
            log.debug("job %s left active by itself (a sleep, or a wait for children)", held.id)
        elif outcome is not None:
            held.settling = True
            if type(outcome) is bytes:  # completed all the same (a stop it did not heed)
                self._join(held, outcome, False)
                return None
            assert isinstance(outcome, Settlement)
            if not (outcome.complete and outcome.traceback is None):
                return outcome
            self._join(held, outcome.result, outcome.cancelled)
            return None
        self.unsettled(held)
        return None

    def tally_of(self, queue: str) -> Tally:
        """``queue``'s tally (made when first asked for)."""
        tally = self.tallies.get(queue)
        if tally is None:
            tally = self.tallies[queue] = Tally()
        return tally

    def unsettled(self, held: Held) -> None:
        """``held`` ends without an outcome: out of the table (handed back unless lost or
        fenced), its slot free."""
        self.inflight.finish([held], ())
        self.room.free(1)

    async def settle(self, held: Held, settlement: Settlement) -> None:
        """Rule 5: record ``settlement`` alone, then finish ``held``."""
        settled = False
        try:
            settled = await self._settle(held, settlement)
        finally:
            self.inflight.finish([held], None if settled else ())
            self.room.free(1)

    # -- counting ----------------------------------------------------------------------

    def _count(self, held: Held, outcome: str, s: Settlement | None = None) -> None:
        held.recorded = outcome
        hooks = self.hooks.get(held.queue)
        if hooks is not None and outcome != "lost" and held.job is not None:
            self._fire(hooks, held, outcome, s)
        c = self.counters
        if outcome == "completed":
            c.completed += 1
        elif outcome == "cancelled":
            c.cancelled += 1
        elif outcome == "lost":
            c.lost += 1
        elif outcome == "dead":
            c.failed += 1
        else:
            c.retried += 1
        self.tally_of(held.queue).record(held.task, outcome, held.ran)

    def _recorded(self, queue: str, items: list[Item]) -> None:
        """Count the completions the server took (cancelled or not), all of ``queue``."""
        done = [held for held, _, cancelled in items if not cancelled]
        if len(done) < len(items):
            for held, _, cancelled in items:
                if cancelled:
                    self._count(held, "cancelled")
        self.counters.completed += len(done)
        self.tally_of(queue).record_many(done, "completed")
        hooks = self.hooks.get(queue)
        if hooks is not None and hooks.settled["completed"]:
            for held in done:
                if held.job is not None:
                    self._fire(hooks, held, "completed", None)

    def _fire(self, hooks: Hooks, held: Held, outcome: str, s: Settlement | None) -> None:
        """Rule 7: the outcome's hooks."""
        assert held.job is not None
        if not hooks.settled[outcome]:
            return
        exc = held.exception
        error = reason = None
        retry_in = None
        if outcome == "cancelled":
            reason = held.cancel_token.reason
            if isinstance(exc, JobCancelled) and exc.reason is not None:
                reason = exc.reason
        elif outcome != "completed" and s is not None:
            error = s.error
            if outcome == "retried":
                retry_in = s.retry_delay_ms / 1000
        job_outcome = JobOutcome(
            outcome=cast(Settled, outcome),
            error=error,
            exception=exc,
            retry_in=retry_in,
            reason=reason,
        )
        hooks.fire(job_outcome, held.job, self._spawn)

    def _spawn(self, fn: Callable[[], Awaitable[None]]) -> None:
        self._base.run(self.nursery.start_soon, fn)

    # -- rule 3: batches of completions ------------------------------------------------

    def _join(self, held: Held, result: bytes, cancelled: bool) -> None:
        queue = held.queue
        batch = self._collecting.get(queue)
        if batch is None:
            batch = self._collecting[queue] = []
            self._base.run(self.nursery.start_soon, self._lead, queue, batch)
        batch.append((held, result, cancelled))

    async def _lead(self, queue: str, batch: list[Item]) -> None:
        """A batch's own task: it runs one tick after its first job joined."""
        if self._collecting.get(queue) is batch:
            del self._collecting[queue]
        settled: set[Held] = set()
        try:
            await self._record(queue, batch, settled)  # (shielded: nothing lands here)
        finally:  # (not settled: handed back, or left to recovery)
            self.inflight.finish([held for held, _, _ in batch], settled)
            self.room.free(len(batch))

    async def _record(self, queue: str, batch: list[Item], settled: set[Held]) -> None:
        with trio.CancelScope(shield=True):
            with trio.move_on_after(self.settle_timeout):
                for chunk in _chunks(batch):
                    await self._chunk(queue, chunk, settled)
            if len(settled) < len(batch):
                log.error(
                    "%d job(s) could not be settled within %.1f s; their leases will "
                    "lapse and recovery returns them",
                    len(batch) - len(settled),
                    self.settle_timeout,
                )
                settled.update(held for held, _, _ in batch)  # recovery owns them now

    async def _chunk(self, queue: str, chunk: list[Item], settled: set[Held]) -> None:
        backoff = Backoff(0.02, 1.0)
        while True:
            try:
                self.batches += 1
                answers = await complete_held(
                    self.conn,
                    queue,
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
        if answers.count(CompleteResult.OK) < len(chunk):  # some were taken over
            recorded = []
            for item, answer in zip(chunk, answers, strict=True):
                if answer is CompleteResult.OK:
                    recorded.append(item)
                    continue
                held = item[0]
                self._count(held, "lost")
                refusal = _REFUSALS.get(answer, ScriptError)(f"complete {held.id}: {answer}")
                log.warning(
                    "job %s: settling refused (%r); a newer holder owns it", held.id, refusal
                )
        self._recorded(queue, recorded)
        settled.update([held for held, _, _ in chunk])

    async def _alone(self, item: Item, settled: set[Held]) -> None:
        held, result, cancelled = item
        settlement = Settlement(complete=True, result=result, cancelled=cancelled)
        if await self._settle(held, settlement):
            settled.add(held)

    # -- rule 5: one job alone -----------------------------------------------------------

    async def _settle(self, held: Held, settlement: Settlement) -> bool:
        """Record the outcome; True once the server took it (or already had it)."""
        s = settlement
        with trio.CancelScope(shield=True), trio.move_on_after(self.settle_timeout):
            backoff = Backoff(0.02, 1.0)
            while True:
                try:
                    if s.traceback is not None:
                        await self._write_log(held, s.traceback)
                        s = attrs.evolve(s, traceback=None)
                    await self._apply(held, s)
                    return True
                except _LOST as exc:
                    # a cooperative cancel that its fence overtook counts as cancelled
                    self._count(held, "cancelled" if s.cancelled else "lost")
                    log.warning(
                        "job %s: settling refused (%r); a newer holder owns it, or a fence "
                        "settled it",
                        held.id,
                        exc,
                    )
                    return True  # never retried, never handed back
                except TRANSIENT as exc:
                    log.warning("job %s: settling failed (%s); retrying", held.id, exc)
                    await backoff.sleep()
                except Exception as exc:  # not transient: fail the job instead
                    why = error_text(exc, REASON_ROOM)
                    if s.fallback:
                        log.error(
                            "job %s: settling refused again (%s); its lease will lapse and "
                            "recovery counts it as stalled",
                            held.id,
                            why,
                        )
                        return True
                    log.error("job %s: settling refused (%s); failing it dead", held.id, why)
                    s = fallback(s, why)
        log.error(
            "job %s: could not settle within %.1f s; its lease will lapse and recovery returns it",
            held.id,
            self.settle_timeout,
        )
        return True  # do not also hand it back: the recovery sweep owns it now

    async def _write_log(self, held: Held, line: str) -> None:
        """Append the traceback to the job's logs; only a transient error is worth a retry."""
        try:
            await jobs.add_log(self.conn, held.queue, held.id, line)
        except TRANSIENT:
            raise
        except JobGone:
            pass  # the fail that follows says so
        except Exception as exc:  # the failure matters more than its log
            log.error("job %s: its traceback was not logged (%s)", held.id, error_text(exc, 512))

    async def _apply(self, held: Held, s: Settlement) -> None:
        conn, name = self.conn, held.queue
        if s.backoff_ms is not None:  # RateLimited: no failure counted (docs/lanes.md)
            until = await jobs.rate_limited(conn, name, held.id, held.token, s.backoff_ms)
            if until == 0:  # a cancel request came first: the job ends cancelled
                reason = held.cancel_token.reason
                await jobs.complete(conn, name, held.id, held.token, cancelled_result(reason))
                self._count(held, "cancelled")
                return
            held.recorded = "rate limited"
            log.info("job %s is rate limited: back in %d ms", held.id, s.backoff_ms)
            return
        if s.complete:
            await jobs.complete(conn, name, held.id, held.token, s.result)
            self._count(held, "cancelled" if s.cancelled else "completed")
            return
        outcome = await jobs.fail(
            conn, name, held.id, held.token, s.error, retry_delay_ms=s.retry_delay_ms, dead=s.dead
        )
        self._count(held, "dead" if outcome == "dead" else "retried", s)
