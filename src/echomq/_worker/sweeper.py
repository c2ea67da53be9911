"""The recovery supervisor: ``reap`` or ``stalled.check`` once per interval per queue.

Rule 1: each tick first takes the queue's sweep guard (SET NX PX), so however many
workers serve a queue, one of them sweeps per interval; the others skip the tick.
Rule 2: the first tick runs at start, so a restarted fleet recovers its predecessors'
jobs at once; a sweep that fills its page runs again at once (a few pages at most).
Rule 3: both modes count an expired lease as a stall (except a lease from before a Redis
restart), so a job that crashes its worker is bounded: ``stalled`` dead-letters at
``max_stalled`` stalls, ``reap`` recovers a job ``max_stalled`` times and dead-letters it
at the next stall.
Rule 4: the worker that sweeps also reads the queue's count-guard counters
(``metrics:capped``): when they grew, rows or completions entries were deleted before
their retention (docs/results.md), and it logs a warning (at most once a minute).
Rule 5: the worker that sweeps also relays the queue's outbox (flow children whose
parent is on another queue, docs/flows.md "Across queues"): entries another relay took
and left unacknowledged for 10 intervals first, then new ones; a failed relay is logged
and retried at the next sweep (nothing is acknowledged before the parent's script answered).
An ACL refusal of the relay (``PermissionDenied``) is logged once as an error (again only
when it changes), not at every sweep.
Rule 6: the worker that sweeps also runs the retention sweep (``admin.sweep_retention``):
the finished-state indexes and the completions stream lose what retention has ended,
``MAX_SWEEP`` entries per call, called again at once while a call says ``more`` (so an idle
queue is clean one tick after its retention ends; with nothing to do it is one cheap
call per tick). A refused sweep (not transient) is logged and tried at the next tick; an
ACL refusal (a rule from before the sweep, without ``+xrange``) is logged once as an
error, as the relay's is; neither stops the stall sweep or the worker.
"""

from __future__ import annotations

import logging
import math
import uuid

import attrs
import trio

from .. import admin, flows, jobs, stalled
from .._scripts.calls import Executor
from ..config import Recovery
from ..errors import TRANSIENT, PermissionDenied
from ..stalled import take_sweep_guard

__all__ = ["Recovery", "Sweeper"]  # (Recovery lives in config.py; re-exported)

log = logging.getLogger("echomq.worker")

_PAGE = 100
_MAX_PAGES = 10
_RETENTION_PAGE = admin.MAX_SWEEP
_MAX_RETENTION_PAGES = 1000  # calls per tick at most (each within the scripts' bound)


@attrs.define(eq=False)
class Sweeper:
    conn: Executor
    queue: str
    recovery: Recovery
    interval: float
    max_stalled: int
    owner: str = attrs.field(factory=lambda: uuid.uuid4().hex)
    sweeps: int = 0
    recovered: int = 0
    dead: int = 0
    relayed: int = 0  # outbox entries relayed to parents on other queues
    swept: int = 0  # index and stream entries the retention sweep removed
    _nudged: trio.Event = attrs.field(factory=trio.Event, init=False)
    capped: admin.Capped | None = None  # the count-guard counters last read
    _capped_warned: float = -math.inf
    _refused: str | None = None  # the relay's ACL refusal last logged
    _sweep_refused: str | None = None  # the retention sweep's ACL refusal last logged

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            try:
                await self.sweep_once()
            except TRANSIENT as exc:
                log.warning("recovery: %s; retrying next interval", exc)
            await trio.sleep(self.interval)

    async def sweep_once(self) -> bool:
        """One guarded sweep; False when another worker holds this interval's guard."""
        # the guard lapses a little before our next tick, so the same worker can take it again
        ttl_ms = max(1, round(self.interval * 900))
        if not await take_sweep_guard(self.conn, self.queue, self.owner, ttl_ms):
            return False
        self.sweeps += 1
        for _ in range(_MAX_PAGES):
            if self.recovery == "reap":
                sweep = await jobs.reap_counted(
                    self.conn, self.queue, limit=_PAGE, max_recoveries=self.max_stalled
                )
            else:
                sweep = await stalled.check(
                    self.conn, self.queue, max_stalled=self.max_stalled, limit=_PAGE
                )
            if sweep.recovered or sweep.dead:
                log.info(
                    "recovery (%s): expired leases back to pending %s, dead-lettered %s",
                    self.recovery,
                    sweep.recovered,
                    sweep.dead,
                )
            self.recovered += len(sweep.recovered)
            self.dead += len(sweep.dead)
            if len(sweep.recovered) + len(sweep.dead) < _PAGE:
                break
        await self._relay()
        await self._sweep_retention()
        await self._check_capped()
        return True

    async def _sweep_retention(self) -> None:
        for _ in range(_MAX_RETENTION_PAGES):
            try:
                step = await admin.sweep_retention(self.conn, self.queue, limit=_RETENTION_PAGE)
            except TRANSIENT:  # as the sweep: retried next interval
                raise
            except PermissionDenied as exc:  # configuration: said once, tried each tick
                # by what was refused: the text differs between EVAL and EVALSHA
                refused = f"{exc.command}: {exc.missing}"
                if refused != self._sweep_refused:
                    self._sweep_refused = refused
                    log.error("retention sweep of %s refused: %s", self.queue, exc)
                return
            except Exception as exc:  # a refused sweep: logged, tried at the next tick
                log.warning("retention sweep of %s failed: %s", self.queue, exc)
                return
            self._sweep_refused = None
            self.swept += step.work
            if not step.more:
                return

    def relay_soon(self) -> None:
        """An outbox entry was written (its script published ``outbox`` on the workers'
        channel): relay now (:meth:`run_relay`), not at the next sweep."""
        self._nudged.set()

    async def run_relay(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Relay the outbox whenever nudged (no sweep guard: the consumer group hands each
        entry to one relay); nudges that come while it relays are folded into one."""
        task_status.started()
        while True:
            await self._nudged.wait()
            self._nudged = trio.Event()
            try:
                await self._relay()
            except TRANSIENT as exc:
                log.warning(
                    "flows: relaying the outbox of %s: %s; at the next sweep", self.queue, exc
                )

    async def _relay(self) -> None:
        idle_ms = max(100, round(self.interval * 10_000))
        for _ in range(_MAX_PAGES):
            try:
                relayed = await flows.relay_outbox(
                    self.conn, self.queue, self.owner, idle_ms=idle_ms, count=_PAGE
                )
            except TRANSIENT:  # as the sweep: retried next interval
                raise
            except PermissionDenied as exc:  # configuration: said once, tried each sweep
                if str(exc) != self._refused:
                    self._refused = str(exc)
                    log.error("flows: relaying the outbox of %s refused: %s", self.queue, exc)
                return
            except Exception as exc:  # a refused relay: logged, retried at the next sweep
                log.warning("flows: relaying the outbox of %s failed: %s", self.queue, exc)
                return
            self._refused = None
            self.relayed += relayed
            if relayed < _PAGE:
                return

    async def _check_capped(self) -> None:
        now = await admin.capped(self.conn, self.queue)
        before, self.capped = self.capped, now
        grew = now.total > (before.total if before is not None else 0)
        if not grew or trio.current_time() - self._capped_warned < 60.0:
            if grew and before is not None:
                self.capped = before  # keep counting from the last warning
            return
        self._capped_warned = trio.current_time()
        base = before or admin.Capped()
        log.warning(
            "retention of %s: the count guard deleted %d completed rows, %d dead rows and "
            "%d completions entries before their time (%s in all so far): results are "
            "kept less long than keep_result says; raise max_completed / max_dead / "
            "completions_max or lower the keeps (admin.set_retention, docs/results.md)",
            self.queue,
            now.completed - base.completed,
            now.dead - base.dead,
            now.completions - base.completions,
            now.total,
        )
