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
"""

from __future__ import annotations

import logging
import math
import uuid

import attrs
import trio

from .. import admin, jobs, stalled
from .._redis.scripts import Executor
from .._verbs.guard import take_sweep_guard
from ..config import Recovery
from ..errors import TRANSIENT

__all__ = ["Recovery", "Sweeper"]  # (Recovery lives in config.py; re-exported)

log = logging.getLogger("echomq.worker")

_PAGE = 100
_MAX_PAGES = 10


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
    capped: admin.Capped | None = None  # the count-guard counters last read
    _capped_warned: float = -math.inf

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
        await self._check_capped()
        return True

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
