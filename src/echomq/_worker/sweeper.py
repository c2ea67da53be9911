"""The recovery supervisor: ``reap`` or ``stalled.check`` once per interval per queue.

Rule 1: each tick first takes the queue's sweep guard (SET NX PX), so however many
workers serve a queue, one of them sweeps per interval; the others skip the tick.
Rule 2: the first tick runs at start, so a restarted fleet recovers its predecessors'
jobs at once; a sweep that fills its page runs again at once (a few pages at most).
Rule 3: both modes count an expired lease as a stall (except a lease from before a Redis
restart), so a job that crashes its worker is bounded: ``stalled`` dead-letters at
``max_stalled`` stalls, ``reap`` recovers a job ``max_stalled`` times and dead-letters it
at the next stall.
"""

from __future__ import annotations

import logging
import uuid

import attrs
import trio

from .. import jobs, stalled
from .._redis.scripts import Executor
from .._verbs.guard import take_sweep_guard
from ..config import Recovery
from ..errors import ConnectionLost

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

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            try:
                await self.sweep_once()
            except ConnectionLost as exc:
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
        return True
