"""``Worker.serve``: one nursery supervises the loops that run a queue's jobs.

Layout::

    serve
    ├── queue.open()              the command connection (shared) + the event feed
    ├── wake connection           the claims (BLPOP and the claim behind it when idle)
    ├── jobs nursery              slot tasks (pool.py), each in a nursery of its own, that
    │                             run the held jobs (run.py), and the batches of
    │                             completions (settle.py); outlives the helpers
    └── helpers nursery           each supervised: crash -> logged -> restarted with backoff
        ├── claim loop            claims.py
        ├── lease keeper          lease.py
        ├── recovery supervisor   sweeper.py
        ├── outbox relay          sweeper.py: flow children's outcomes to parents on other
        │                         queues, when nudged
        ├── repeat scheduler      repeater.py (fires due repeatable runs; unless scheduler=off)
        ├── listeners             listeners.py: cancel events (emq:{q}:control) ->
        │                         InFlight.request_cancel; jobs scheduled; outbox nudges
        ├── escalator             a cancel's grace ran out: fence, stop hard (escalation.py)
        └── watchdog              a thread: heartbeat record, blocked loop (watchdog.py)

Wiring: :meth:`Worker._assemble` builds every part once, top down, each given what it
needs; a finished job goes one way: run (run.py) -> settle (settle.py) -> its slot freed
(room.py) -> the claim loop, waiting on the room, claims again.

Start: until Redis answers, ``serve`` waits with backoff (startup.py), one log line per
attempt; a stop asked meanwhile ends it cleanly. Then the queue's data layout must be this
echomq's (``admin.ensure_schema``: marked if absent, ``SchemaMismatch`` if another).

Shutdown (``shutdown()``, or SIGINT/SIGTERM through ``run_worker``): stop claiming; hand
the prefetched jobs (claimed, not started: claims.py rule 5) back to pending at once
with one fenced ``release``; wait up to ``grace`` seconds for held jobs (the lease keeper
keeps renewing them); cancel the rest and hand them back to pending at once with one
fenced ``release``; then stop the helpers. A second ``shutdown(grace=0)`` cuts the wait short.

A worker that fails (an error leaves ``serve``) is a crash: its started jobs go to
recovery, counted as stalls, its prefetched jobs back to pending (handback.py). Only a
stop asked for ends ``serve`` quietly: its jobs or helpers ending without one (a scope of
the worker's cancelled by code running in it) is such a failure too.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import attrs
import trio

from .. import admin
from .._model.options import DEFAULT_LEASE, seconds, to_ms
from .._trio import open_service_nursery
from .._wire.dial import connect
from .._wire.interface import RedisConnection
from ..config import WorkerConfig, parse_url
from ..errors import InvalidArgument
from ..events import EventFeed, open_control_feed
from . import handback
from .cancellation import InFlight
from .claims import ClaimLoop
from .escalation import Escalator
from .gc_pace import young_threshold
from .lease import LeaseKeeper
from .listeners import follow_cancels, follow_outbox, follow_schedule
from .pool import SlotPool
from .protocols import QUEUE_ATTRIBUTES, QueueSpec
from .repeater import Repeater
from .room import Room
from .run import JobRunner
from .settle import Settler
from .startup import wait_for_redis
from .supervise import Supervisor, is_crash
from .sweeper import Sweeper
from .tally import Counters, Tally
from .watchdog import Watchdog, make_worker_id

__all__ = ["Worker", "WorkerStatistics"]

log = logging.getLogger("echomq.worker")

_CONFIG_FIELDS = frozenset(field.name for field in attrs.fields(WorkerConfig))


@attrs.frozen(kw_only=True)
class WorkerStatistics:
    """A snapshot of one worker."""

    queue: str
    concurrency: int
    held: int
    claimed: int = 0
    completed: int = 0
    failed: int = 0
    retried: int = 0
    cancelled: int = 0
    lost: int = 0
    released: int = 0
    sweeps: int = 0
    recovered: int = 0
    dead_lettered: int = 0
    helper_restarts: int = 0
    claims: int = 0  # claim calls made
    idle_waits: int = 0  # waits on the wake list (the queue was empty or paused)
    stopping: bool
    prefetched: int = 0  # claimed jobs waiting for a slot (counted in held too)
    repeats_fired: int = 0  # repeatable runs this worker's scheduler enqueued
    repeats_raced: int = 0  # due runs another worker's scheduler enqueued first
    abandoned: int = 0  # thread tasks left running after a hard stop (outcome unused)
    terminated: int = 0  # process-task children killed by a hard stop
    fenced: int = 0  # cancels whose grace ran out, fenced by this worker (any holder's)
    blocks: int = 0  # times the watchdog saw this worker's event loop blocked
    heartbeats: int = 0  # heartbeat records written
    redis_stalls: int = 0  # outages the watchdog saw (heartbeats failing or slow): not blocks
    redis_unreachable: bool = False  # the watchdog's last heartbeat did not get through in time


@attrs.frozen
class _Parts:
    """What one ``serve`` runs, built once by :meth:`Worker._assemble`."""

    counters: Counters
    room: Room
    settler: Settler
    runner: JobRunner
    pool: SlotPool
    claims: ClaimLoop
    keeper: LeaseKeeper
    sweeper: Sweeper
    escalator: Escalator
    watchdog: Watchdog
    repeater: Repeater | None


async def _control_feed(url: str, queue: str, *, task_status: trio.TaskStatus[EventFeed]) -> None:
    async with open_control_feed(url, queue) as feed:
        task_status.started(feed)
        await trio.sleep_forever()


class Worker:
    """Runs a queue's tasks. ``trio.run(worker.serve)`` or ``await nursery.start(worker.serve)``.

    ``Worker(queue, config=WorkerConfig(...))``, or the config's fields as keywords:
    ``Worker(queue, concurrency=8, grace=0)`` (keywords given with a config replace its
    fields). Every option, its default and its meaning is a field of
    :class:`~echomq.config.WorkerConfig`; ``worker.config`` holds them (and
    ``worker.concurrency`` etc. read them).

    Args:
        queue: the :class:`~echomq.Queue` whose registered tasks this worker runs (any
            object with its shape will do: ``_worker/protocols.QueueSpec``).
        config: the options (default: ``WorkerConfig()``).
        **options: fields of ``WorkerConfig`` (concurrency, recovery, recovery_interval,
            max_stalled, grace, settle_timeout).

    Raises:
        InvalidArgument: a bad or unknown option (before any I/O).
    """

    def __init__(
        self, queue: QueueSpec, config: WorkerConfig | None = None, **options: Any
    ) -> None:
        if not all(hasattr(queue, name) for name in QUEUE_ATTRIBUTES):
            raise InvalidArgument(f"Worker needs an echomq.Queue, not {queue!r}")
        unknown = sorted(set(options) - _CONFIG_FIELDS)
        if unknown:
            raise InvalidArgument(
                f"unknown worker option(s) {', '.join(unknown)}; "
                f"the options are {', '.join(sorted(_CONFIG_FIELDS))}"
            )
        if config is not None and not isinstance(config, WorkerConfig):
            raise InvalidArgument(f"config must be a WorkerConfig, not {config!r}")
        base = config if config is not None else WorkerConfig()
        self.config = attrs.evolve(base, **options) if options else base
        self.queue = queue
        self.id = make_worker_id()  # its heartbeat record: emq:{q}:worker:<id>
        self.inflight = InFlight()
        self._stop = trio.Event()
        self._hurry = trio.Event()
        self._parts: _Parts | None = None  # while (and after) serving
        self._supervisor = Supervisor()
        self._serving = False
        self.metrics_address: tuple[str, int] | None = None  # (host, port) of /metrics

    def __getattr__(self, name: str) -> Any:
        """``worker.concurrency``, ``worker.grace``...: the config's fields, read-only."""
        if name in _CONFIG_FIELDS:
            return getattr(self.config, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # -- control -----------------------------------------------------------------------

    def shutdown(self, *, grace: float | None = None) -> None:
        """Ask for a graceful stop (safe to call from any task, any number of times).

        ``grace=0`` (or a second call with it) stops waiting for in-flight jobs: they are
        cancelled and handed back to pending at once.
        """
        if grace is not None and seconds("grace", grace) == 0:
            self._hurry.set()
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def _keeper(self) -> LeaseKeeper | None:
        """The lease keeper (reached by ``echomq.testing.freeze_renewal`` and the CLI's
        fault hooks)."""
        return self._parts.keeper if self._parts is not None else None

    @property
    def _repeater(self) -> Repeater | None:
        return self._parts.repeater if self._parts is not None else None

    def _tally(self) -> Tally:
        """The per-task numbers (``metrics.py``)."""
        return self._parts.settler.tally if self._parts is not None else Tally()

    def statistics(self) -> WorkerStatistics:
        p = self._parts
        if p is None:
            return WorkerStatistics(
                queue=self.queue.name,
                concurrency=self.config.concurrency,
                held=len(self.inflight),
                helper_restarts=self._supervisor.restarts,
                stopping=self.stopping,
            )
        c = p.counters
        return WorkerStatistics(
            queue=self.queue.name,
            concurrency=self.config.concurrency,
            held=len(self.inflight),
            claimed=c.claimed,
            completed=c.completed,
            failed=c.failed,
            retried=c.retried,
            cancelled=c.cancelled,
            lost=c.lost,
            released=c.released,
            sweeps=p.sweeper.sweeps,
            recovered=p.sweeper.recovered,
            dead_lettered=p.sweeper.dead,
            helper_restarts=self._supervisor.restarts,
            claims=p.claims.claims,
            idle_waits=p.claims.idle_waits,
            stopping=self.stopping,
            prefetched=p.claims.prefetched,
            repeats_fired=p.repeater.fired if p.repeater else 0,
            repeats_raced=p.repeater.raced if p.repeater else 0,
            abandoned=c.abandoned,
            terminated=c.terminated,
            fenced=p.escalator.fenced + p.watchdog.fenced,
            blocks=p.watchdog.blocks,
            heartbeats=p.watchdog.beats,
            redis_stalls=p.watchdog.stalls,
            redis_unreachable=p.watchdog.unreachable_since is not None,
        )

    # -- serving -----------------------------------------------------------------------

    def _leases(self) -> tuple[int, float]:
        """The claim lease (the longest task lease, ms) and the keeper's period (s)."""
        leases = [t.options.lease_ms for t in self.queue.tasks.values()] or [
            to_ms("lease", DEFAULT_LEASE)
        ]
        return max(leases), min(leases) / 3000.0

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until :meth:`shutdown` (or cancellation); ``started()`` once claiming.

        Cancelling ``serve`` from outside (its caller's scope) is a shutdown without grace:
        the held jobs are cancelled and handed back to pending before the cancellation
        goes on. The worker's own connections live under a shield until then, so no reply
        in flight (a claim that already took jobs) is lost on the way out.
        """
        if self._serving:
            raise RuntimeError("this worker is already serving")
        self._serving = True
        try:
            with young_threshold():  # gc_pace.py: the collector's pace while serving
                await self._serve_outside(task_status)
        finally:
            self._serving = False

    async def _serve_outside(self, task_status: trio.TaskStatus[None]) -> None:
        async with trio.open_nursery() as outside:
            outside.start_soon(self._stop_when_cancelled)
            with trio.CancelScope(shield=True):
                await self._serve_shielded(task_status)
            outside.cancel_scope.cancel()

    async def _stop_when_cancelled(self) -> None:
        """Outside the shield: a cancellation of ``serve`` lands here and asks for a stop."""
        try:
            await trio.sleep_forever()
        finally:
            self.shutdown(grace=0)

    async def _serve_shielded(self, task_status: trio.TaskStatus[None]) -> None:
        queue = self.queue
        async with queue.open(), open_service_nursery() as feeds:
            # Redis may not be up yet (a fleet booting): wait for it, or for a stop;
            # then the queue's layout must be this echomq's (SchemaMismatch otherwise).
            # The worker hears the workers' channel (cancel requests, jobs scheduled),
            # not every job's lifecycle events.
            async def ready() -> EventFeed:
                await admin.ensure_schema(queue.connection, queue.name)
                feed: EventFeed = await feeds.start(_control_feed, queue.url, queue.name)
                return feed

            feed = await wait_for_redis(queue.url, self._stop, ready)
            if feed is None:
                log.info("stopped while waiting for redis")
                return
            async with connect(queue.url) as wake_conn:
                await self._serve(queue.connection, wake_conn, feed, task_status)

    async def _serve(
        self,
        conn: RedisConnection,
        wake_conn: RedisConnection,
        feed: EventFeed,
        task_status: trio.TaskStatus[None],
    ) -> None:
        name = self.queue.name
        if not self.queue.tasks:
            log.warning("queue %r has no registered tasks: every job will fail", name)
        crashed = False
        parts: _Parts | None = None
        try:
            async with trio.open_nursery() as jobs_nursery:
                parts = self._parts = self._assemble(conn, wake_conn, feed, jobs_nursery)
                async with trio.open_nursery() as helpers:
                    await self._start_helpers(helpers, parts, feed)
                    claiming = trio.CancelScope()
                    await helpers.start(self._claim_until_stopped, claiming, parts.claims)
                    log.info(
                        "worker serving %r at %s: tasks %s, concurrency %d, "
                        "recovery %s every %.1f s, worker id %s",
                        name,
                        parse_url(self.queue.url).display,
                        sorted(self.queue.tasks),
                        self.config.concurrency,
                        self.config.recovery,
                        self.config.recovery_interval,
                        self.id,
                    )
                    task_status.started()
                    await self._stop.wait()
                    await parts.claims.stop()
                    # the prefetched jobs, at once
                    await handback.release(conn, self.queue.name, self.inflight, parts.counters)
                    claiming.cancel()
                    await self._drain()
                    parts.pool.close()
                    helpers.cancel_scope.cancel()
                self._asked_to_stop()
            self._asked_to_stop()
        except BaseException as exc:
            crashed = is_crash(exc)
            raise
        finally:
            if parts is not None:
                await handback.serve_ended(
                    conn, self.queue.name, self.inflight, parts.claims, parts.counters, crashed
                )
                await parts.runner.processes.aclose()

    def _assemble(
        self,
        conn: RedisConnection,
        wake_conn: RedisConnection,
        feed: EventFeed,
        jobs_nursery: trio.Nursery,
    ) -> _Parts:
        """Build every part of one ``serve``, top down, each given what it needs."""
        name, config, inflight = self.queue.name, self.config, self.inflight
        claim_lease_ms, period = self._leases()
        counters = Counters()
        room = Room(config.concurrency)
        hooks = getattr(self.queue, "hooks", None)  # (echomq.Queue's: hooks.py)
        settler = Settler(
            conn=conn,
            queue=name,
            inflight=inflight,
            room=room,
            nursery=jobs_nursery,
            settle_timeout=config.settle_timeout,
            counters=counters,
            hooks=hooks,
        )
        runner = JobRunner(
            queue=self.queue, conn=conn, settler=settler, counters=counters, hooks=hooks
        )
        pool = SlotPool(jobs_nursery, runner.run)
        claims = ClaimLoop(
            conn=conn,
            wake_conn=wake_conn,
            queue=name,
            inflight=inflight,
            room=room,
            pool=pool,
            counters=counters,
            claim_lease_ms=claim_lease_ms,
            worker=self.id,
            prefetch=self._prefetch(),
        )
        return _Parts(
            counters=counters,
            room=room,
            settler=settler,
            runner=runner,
            pool=pool,
            claims=claims,
            keeper=LeaseKeeper(conn, name, inflight, period),
            sweeper=Sweeper(
                conn, name, config.recovery, config.recovery_interval, config.max_stalled
            ),
            escalator=Escalator(conn, name, inflight, retry=period / 2),
            watchdog=Watchdog(
                url=self.queue.url,
                queue=name,
                worker_id=self.id,
                inflight=inflight,
                counters=functools.partial(attrs.asdict, counters),
                concurrency=config.concurrency,
                claim_lease_ms=claim_lease_ms,
                keeper_period=period,
                config=config,
            ),
            repeater=Repeater(conn, self.queue, feed) if config.scheduler else None,
        )

    async def _start_helpers(self, helpers: trio.Nursery, parts: _Parts, feed: EventFeed) -> None:
        """The supervised helper loops (the claim loop starts last, on its own)."""
        supervise = self._supervisor.supervise
        if self.config.metrics_port is not None:
            await self._serve_metrics(helpers)
        loops = [
            ("cancel listener", functools.partial(follow_cancels, feed, self.inflight)),
            ("schedule listener", functools.partial(follow_schedule, feed, parts.claims)),
            ("lease keeper", parts.keeper.run),
            ("recovery", parts.sweeper.run),
            ("outbox relay", parts.sweeper.run_relay),
            ("outbox listener", functools.partial(follow_outbox, feed, parts.sweeper)),
        ]
        if parts.repeater is not None:
            loops.append(("repeat scheduler", parts.repeater.run))
        loops += [("escalator", parts.escalator.run), ("watchdog", parts.watchdog.run)]
        for name, loop in loops:
            await helpers.start(supervise, name, loop)

    def _asked_to_stop(self) -> None:
        """A nursery of the worker's ended quietly: only a stop asked for may end it. A
        scope of the worker's cancelled by anything else (user code reaching past its
        slot) is a failure, never a clean stop (which would hand its jobs back uncounted
        and exit 0)."""
        if not self._stop.is_set():
            raise RuntimeError(
                "the worker's jobs were cancelled from inside, and no shutdown was asked for"
            )

    def _prefetch(self) -> int:
        """The prefetch bound (``WorkerConfig.prefetch``; default: half the concurrency)."""
        prefetch = self.config.prefetch
        return (self.config.concurrency + 1) // 2 if prefetch is None else prefetch

    async def _serve_metrics(self, nursery: trio.Nursery) -> None:
        """``/metrics`` (``metrics_port``; docs/observability.md): a port that cannot be
        bound fails the start, loudly."""
        from .metrics import render, serve_metrics, worker_registry

        registry, collector = worker_registry(self)

        async def body(accept: str | None) -> tuple[bytes, str]:
            await collector.refresh()
            return render(registry, accept)

        host, port = self.config.metrics_host, self.config.metrics_port
        assert port is not None
        bound = await nursery.start(serve_metrics, host, port, body)
        self.metrics_address = (host, bound)

    async def _claim_until_stopped(
        self,
        claiming: trio.CancelScope,
        claims: ClaimLoop,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        with claiming:
            await self._supervisor.supervise("claim loop", claims.run, task_status=task_status)
        log.info("stopped claiming on %r", self.queue.name)

    async def _drain(self) -> None:
        """Wait up to grace for held jobs, then cancel the rest (handed back by _release)."""
        held = len(self.inflight)
        if held:
            log.info("shutdown: waiting up to %.1f s for %d job(s)", self.config.grace, held)
        with trio.move_on_after(self.config.grace):
            async with trio.open_nursery() as race:

                async def idle() -> None:
                    await self.inflight.wait_idle()
                    race.cancel_scope.cancel()

                async def hurry() -> None:
                    await self._hurry.wait()
                    race.cancel_scope.cancel()

                race.start_soon(idle)
                race.start_soon(hurry)
        if len(self.inflight):
            log.info("shutdown: cancelling %d job(s) past grace", len(self.inflight))
        self.inflight.shut_down_all()
        await self.inflight.wait_idle()
