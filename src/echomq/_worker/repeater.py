"""The scheduler side of repeatable jobs: every worker runs it, no leader (docs/repeat.md).

Rule 1: at start, the queue's repeatable tasks (``@queue.task(cron=...)`` / ``every=``)
are registered under their names (``repeat.add``, an upsert: the same schedule keeps its
next slot, so a fleet starting at once changes nothing).
Rule 2: then one pass (``repeat.tick``) after another: every due run is enqueued, exactly
once however many workers race (a compare-and-set on the record's next slot, inside the
enqueue script). Between passes the loop sleeps until the earliest next slot (the
server's clock says how far it is), at most ``MAX_IDLE`` seconds, or until a ``repeat``
event (a repeatable added or resumed) wakes it.
Rule 3: a pass that fails on a lost connection is retried with a jittered backoff; nothing
is lost meanwhile: a run due during an outage fires at the next pass (its missed policy
says how, when it is late).
Rule 4: the decorated schedules come back after Redis lost its data (a restart without
persistence, a failover to an empty replica, ``FLUSHALL``): the loop checks that the
queue's meta hash and each decorated record it registered still exist (one ``EXISTS`` of
those keys, in the first pass ``CHECK_EVERY`` seconds after the last check, and in any
pass that found no upcoming slot at all), and registers them again when one is missing,
with a WARNING naming what was missing. A decorated schedule lives as long as a worker serves its
decorator: one removed by hand comes back too (pause it to stop it; docs/repeat.md).
"""

from __future__ import annotations

import logging

import attrs
import trio

from .. import repeat
from .._jitter import Backoff
from .._model.options import expires_fields
from .._model.repeat import RepeatSource
from .._scripts.keyspace import keyspace
from .._wire.interface import RedisConnection
from ..errors import ConnectionLost, RepeatFormatError
from ..events import EventFeed
from .protocols import QueueSpec

__all__ = ["CHECK_EVERY", "MAX_IDLE", "Repeater"]

log = logging.getLogger("echomq.worker")

MAX_IDLE = 5.0  # seconds between passes at most: a missed wake event costs this much
CHECK_EVERY = 1.0  # seconds between two checks that the decorated records exist (rule 4)
_TASK: RepeatSource = "task"


@attrs.define(eq=False)
class Repeater:
    conn: RedisConnection
    queue: QueueSpec
    feed: EventFeed
    max_idle: float = MAX_IDLE
    check_every: float = CHECK_EVERY
    passes: int = 0
    fired: int = 0
    raced: int = 0
    skipped: int = 0
    restored: int = 0  # times the decorated schedules were found missing and registered again
    _wake: trio.Event = attrs.field(factory=trio.Event, init=False)
    _registered: list[str] = attrs.field(factory=list, init=False)  # keys registered at start

    async def register(self) -> int:
        """Register the queue's repeatable tasks; answer how many."""
        count = 0
        self._registered = []
        for task in self.queue.tasks.values():
            schedule = task.options.schedule()
            if schedule is None:
                continue
            try:
                added = await repeat.add(
                    self.conn,
                    self.queue.name,
                    task.name,
                    task=task.name,
                    payload=self.queue.codec.encode_call(task.name, (), {}),
                    schedule=schedule,
                    missed=task.options.missed,
                    priority=task.options.priority,
                    max_attempts=task.options.max_attempts,
                    source=_TASK,
                    expires_ms=expires_fields(task.options.expires).get("expires_ms"),
                )
            except RepeatFormatError as exc:
                log.error("repeatable task %r not registered: %s", task.name, exc)
                continue
            count += 1
            self._registered.append(task.name)
            if added.rescheduled:
                log.info("repeatable task %r: %s", task.name, schedule.describe())
        return count

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with self.feed.listen(events=("repeat",), buffer=64) as events:
            async with trio.open_nursery() as nursery:

                async def wake_on_events() -> None:
                    async for _ in events:
                        self._wake.set()

                nursery.start_soon(wake_on_events)
                task_status.started()
                await self._loop()

    def wake(self) -> None:
        """Look again now (a repeatable was added or resumed)."""
        self._wake.set()

    async def missing(self) -> list[str]:
        """The keys of rule 4 that are gone: ``meta`` and the decorated records (one
        ``EXISTS`` when none is; each named otherwise). Nothing registered: nothing to check."""
        if not self._registered:
            return []
        ks = keyspace(self.queue.name)
        keys = [ks.meta, *(ks.repeat_record(name) for name in self._registered)]
        if await self.conn.execute("EXISTS", *keys) == len(keys):
            return []
        found = await self.conn.execute_pipeline([("EXISTS", key) for key in keys])
        names = ["meta", *self._registered]
        return [name for name, there in zip(names, found, strict=True) if there != 1]

    async def _restore(self, missing: list[str]) -> None:
        self.restored += 1
        schedules = [name for name in missing if name != "meta"]
        if "meta" in missing:
            why = (
                "the queue's data is gone from Redis (a restart without persistence, a "
                "failover to an empty replica, FLUSHALL?)"
            )
        else:
            why = "their records are gone from Redis (removed by hand, or lost)"
        log.warning(
            "repeat scheduler: decorated schedule(s) %s missing: %s; registering them again",
            ", ".join(schedules or self._registered),
            why,
        )
        await self.register()

    async def _loop(self) -> None:
        backoff = Backoff(0.1, self.max_idle)
        registered = False
        next_check = 0.0
        while True:
            try:
                if not registered:
                    await self.register()
                    registered = True
                    next_check = trio.current_time() + self.check_every
                tick = await repeat.tick(self.conn, self.queue.name)
                self._count(tick)
                # rule 4: every CHECK_EVERY, and at once when no slot is upcoming at all
                empty = tick.next_ms is None and not tick.paused and not tick.fired
                if trio.current_time() >= next_check or empty:
                    next_check = trio.current_time() + self.check_every
                    missing = await self.missing()
                    if missing:
                        await self._restore(missing)
                        continue
            except ConnectionLost as exc:
                delay = backoff.next()
                log.warning("repeat scheduler: %s; retrying in %.1f s", exc, delay)
                await trio.sleep(delay)
                continue
            backoff.reset()
            if tick.full and (tick.fired or tick.raced or tick.skipped):
                await trio.lowlevel.checkpoint()
                continue
            delay = self.max_idle
            if tick.next_ms is not None and not tick.paused:
                delay = min(delay, max(0.0, (tick.next_ms - tick.now_ms) / 1000))
            with trio.move_on_after(delay):
                await self._wake.wait()
            self._wake = trio.Event()

    def _count(self, tick: repeat.Tick) -> None:
        self.passes += 1
        self.fired += len(tick.fired)
        self.raced += tick.raced
        self.skipped += len(tick.skipped)
        if tick.skipped:
            log.info("repeat: missed runs skipped for %s", tick.skipped)
