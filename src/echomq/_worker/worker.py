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

Several queues (``Worker([high, default, low], ...)``; docs/queues.md): one claim loop asks
them in turn (``queues.py``: strict order or weights, per-queue caps) into the same slots;
one held-job table, lease keeper, settler, escalator and watchdog serve them all (each job
keyed by its queue); each queue has its own wake connection (its claims and its idle
``BLPOP``), event feed and listeners, recovery supervisor, repeat scheduler and run path
(its tasks, its codec, its hooks). The queues share one URL (one server, or one cluster:
each queue's keys on its own master).

A worker that fails (an error leaves ``serve``) is a crash: its started jobs go to
recovery, counted as stalls, its prefetched jobs back to pending (handback.py). Only a
stop asked for ends ``serve`` quietly: its jobs or helpers ending without one (a scope of
the worker's cancelled by code running in it) is such a failure too.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from contextlib import AsyncExitStack
from typing import Any

import attrs
import trio

from .. import admin
from .._model.job import Claimed
from .._model.options import DEFAULT_LEASE, seconds, to_ms
from .._trio import open_service_nursery
from .._wire.dial import connect
from .._wire.interface import RedisConnection
from ..config import WorkerConfig, parse_url
from ..errors import InvalidArgument
from ..events import EventFeed, open_control_feed
from . import handback
from .cancellation import Held, InFlight
from .claims import ClaimLoop, Source
from .escalation import Escalator
from .gc_pace import young_threshold
from .lease import LeaseKeeper
from .listeners import follow_cancels, follow_outbox, follow_schedule
from .pool import SlotPool
from .processes import ProcessPool
from .protocols import QUEUE_ATTRIBUTES, QueueSpec
from .queues import QueueTurns, check_turns
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

    queue: str  # the first queue it serves
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
    queues: tuple[str, ...] = ()  # every queue it serves, in its order
    queue_claims: tuple[int, ...] = ()  # claim calls made to each (several queues only)


@attrs.frozen
class _Parts:
    """What one ``serve`` runs, built once by :meth:`Worker._assemble`."""

    counters: Counters
    room: Room
    settler: Settler
    runners: dict[str, JobRunner]  # per queue
    processes: ProcessPool  # the runners' (one)
    pool: SlotPool
    claims: ClaimLoop
    keeper: LeaseKeeper
    sweepers: tuple[Sweeper, ...]  # per queue
    escalator: Escalator
    watchdog: Watchdog
    repeaters: tuple[Repeater, ...]  # per queue (none: scheduler off)


async def _control_feed(url: str, queue: str, *, task_status: trio.TaskStatus[EventFeed]) -> None:
    async with open_control_feed(url, queue) as feed:
        task_status.started(feed)
        await trio.sleep_forever()


class Worker:
    """Runs a queue's tasks (or several queues'). ``trio.run(worker.serve)`` or
    ``await nursery.start(worker.serve)``.

    ``Worker(queue, config=WorkerConfig(...))``, or the config's fields as keywords:
    ``Worker(queue, concurrency=8, grace=0)`` (keywords given with a config replace its
    fields). Every option, its default and its meaning is a field of
    :class:`~echomq.config.WorkerConfig`; ``worker.config`` holds them (and
    ``worker.concurrency`` etc. read them).

    Args:
        queue: the :class:`~echomq.Queue` whose registered tasks this worker runs (any
            object with its shape will do: ``_worker/protocols.QueueSpec``), or a list of
            them, served by one claim loop in their order (``weights=``, ``caps=``:
            docs/queues.md); they share one URL.
        config: the options (default: ``WorkerConfig()``).
        **options: fields of ``WorkerConfig`` (concurrency, recovery, recovery_interval,
            max_stalled, grace, settle_timeout).

    Raises:
        InvalidArgument: a bad or unknown option (before any I/O).
    """

    def __init__(
        self,
        queue: QueueSpec | Sequence[QueueSpec],
        config: WorkerConfig | None = None,
        **options: Any,
    ) -> None:
        queues = tuple(queue) if isinstance(queue, list | tuple) else (queue,)
        if not queues:
            raise InvalidArgument("Worker needs an echomq.Queue, or a list of them: none given")
        for one in queues:
            if not all(hasattr(one, name) for name in QUEUE_ATTRIBUTES):
                raise InvalidArgument(f"Worker needs an echomq.Queue, not {one!r}")
        names = [one.name for one in queues]
        if len(set(names)) < len(names):
            raise InvalidArgument(f"a queue is named twice in {names}")
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
        check_turns(len(queues), self.config.weights, self.config.caps)
        self.queues = queues
        self._one_url()
        self.queue = queues[0]
        self.id = make_worker_id()  # its heartbeat record: emq:{q}:worker:<id>
        self.inflight = InFlight(queues[0].name)
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
        """The first queue's repeat scheduler."""
        parts = self._parts
        return parts.repeaters[0] if parts is not None and parts.repeaters else None

    def _tally(self, queue: str | None = None) -> Tally:
        """The per-task numbers of ``queue`` (default: the first) (``metrics.py``)."""
        name = self.queue.name if queue is None else queue
        return self._parts.settler.tally_of(name) if self._parts is not None else Tally()

    def _one_url(self) -> None:
        """The queues must share one URL (one server, or one cluster)."""
        urls = sorted({one.url for one in self.queues})
        if len(urls) > 1:
            raise InvalidArgument(
                "the queues of one worker share one URL (one server, or one cluster); "
                f"these have {len(urls)}: {', '.join(parse_url(u).display for u in urls)}"
            )

    def statistics(self) -> WorkerStatistics:
        p = self._parts
        names = tuple(one.name for one in self.queues)
        if p is None:
            return WorkerStatistics(
                queue=self.queue.name,
                concurrency=self.config.concurrency,
                held=len(self.inflight),
                helper_restarts=self._supervisor.restarts,
                stopping=self.stopping,
                queues=names,
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
            sweeps=sum(one.sweeps for one in p.sweepers),
            recovered=sum(one.recovered for one in p.sweepers),
            dead_lettered=sum(one.dead for one in p.sweepers),
            helper_restarts=self._supervisor.restarts,
            claims=p.claims.claims,
            idle_waits=p.claims.idle_waits,
            stopping=self.stopping,
            prefetched=p.claims.prefetched,
            repeats_fired=sum(one.fired for one in p.repeaters),
            repeats_raced=sum(one.raced for one in p.repeaters),
            abandoned=c.abandoned,
            terminated=c.terminated,
            fenced=p.escalator.fenced + p.watchdog.fenced,
            blocks=p.watchdog.blocks,
            heartbeats=p.watchdog.beats,
            redis_stalls=p.watchdog.stalls,
            redis_unreachable=p.watchdog.unreachable_since is not None,
            queues=names,
            queue_claims=tuple(source.claims for source in p.claims.sources),
        )

    # -- serving -----------------------------------------------------------------------

    def _leases(self) -> tuple[int, float]:
        """The claim lease (the longest task lease, ms) and the keeper's period (s)."""
        leases = [t.options.lease_ms for q in self.queues for t in q.tasks.values()] or [
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
        self._one_url()  # (a --url given after construction replaces every queue's)
        queues, url = self.queues, self.queue.url
        async with AsyncExitStack() as stack:
            for one in queues:
                await stack.enter_async_context(one.open())
            feeds = await stack.enter_async_context(open_service_nursery())

            # Redis may not be up yet (a fleet booting): wait for it, or for a stop;
            # then each queue's layout must be this echomq's (SchemaMismatch otherwise).
            # The worker hears the workers' channel of each queue (cancel requests, jobs
            # scheduled), not every job's lifecycle events.
            async def ready() -> list[EventFeed]:
                found: list[EventFeed] = []
                for one in queues:
                    await admin.ensure_schema(one.connection, one.name)
                    found.append(await feeds.start(_control_feed, url, one.name))
                return found

            found = await wait_for_redis(url, self._stop, ready)
            if found is None:
                log.info("stopped while waiting for redis")
                return
            # each queue a wake connection of its own: its claims, and its idle BLPOP
            wake_conns: list[RedisConnection] = [
                await stack.enter_async_context(connect(url)) for _ in queues
            ]
            await self._serve(self.queue.connection, wake_conns, found, task_status)

    async def _serve(
        self,
        conn: RedisConnection,
        wake_conns: list[RedisConnection],
        feeds: list[EventFeed],
        task_status: trio.TaskStatus[None],
    ) -> None:
        for one in self.queues:
            if not one.tasks:
                log.warning("queue %r has no registered tasks: every job will fail", one.name)
        crashed = False
        parts: _Parts | None = None
        try:
            async with trio.open_nursery() as jobs_nursery:
                parts = self._parts = self._assemble(conn, wake_conns, feeds, jobs_nursery)
                async with trio.open_nursery() as helpers:
                    await self._start_helpers(helpers, parts, feeds)
                    claiming = trio.CancelScope()
                    await helpers.start(self._claim_until_stopped, claiming, parts.claims)
                    log.info(
                        "worker serving %r at %s%s: tasks %s, concurrency %d, "
                        "recovery %s every %.1f s, worker id %s",
                        self.queue.name,
                        parse_url(self.queue.url).display,
                        self._serving_too(),
                        sorted({t for one in self.queues for t in one.tasks}),
                        self.config.concurrency,
                        self.config.recovery,
                        self.config.recovery_interval,
                        self.id,
                    )
                    task_status.started()
                    await self._stop.wait()
                    await parts.claims.stop()
                    # the prefetched jobs, at once
                    await handback.release(conn, self.inflight, parts.counters)
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
                    conn, self.inflight, parts.claims, parts.counters, crashed
                )
                await parts.processes.aclose()

    def _serving_too(self) -> str:
        """The other queues, as the start line says them (after the first's name)."""
        names = [one.name for one in self.queues]
        if len(names) == 1:
            return ""
        config = self.config
        how = "strict order" if config.weights is None else f"weights {config.weights}"
        if config.caps is not None:
            how += f", caps {config.caps}"
        return f" with {', '.join(map(repr, names[1:]))} ({how})"

    def _assemble(
        self,
        conn: RedisConnection,
        wake_conns: list[RedisConnection],
        feeds: list[EventFeed],
        jobs_nursery: trio.Nursery,
    ) -> _Parts:
        """Build every part of one ``serve``, top down, each given what it needs."""
        queues, config, inflight = self.queues, self.config, self.inflight
        name = self.queue.name
        claim_lease_ms, period = self._leases()
        counters = Counters()
        room = Room(config.concurrency)
        hooks = {
            one.name: found
            for one in queues
            if (found := getattr(one, "hooks", None)) is not None  # (echomq.Queue's: hooks.py)
        }
        settler = Settler(
            conn=conn,
            inflight=inflight,
            room=room,
            nursery=jobs_nursery,
            settle_timeout=config.settle_timeout,
            counters=counters,
            hooks=hooks,
        )
        processes = ProcessPool()
        runners = {
            one.name: JobRunner(
                queue=one,
                conn=conn,
                settler=settler,
                counters=counters,
                hooks=hooks.get(one.name),
                processes=processes,
            )
            for one in queues
        }
        if len(runners) == 1:
            pool = SlotPool(jobs_nursery, runners[name].run)
        else:

            async def run(job: Claimed, held: Held) -> None:
                await runners[held.queue].run(job, held)

            pool = SlotPool(jobs_nursery, run)
        sources: tuple[Source, ...] = ()
        turns = None
        if len(queues) > 1:
            sources = tuple(
                Source(one.name, wake) for one, wake in zip(queues, wake_conns, strict=True)
            )
            turns = QueueTurns(len(queues), config.weights, config.caps)
        claims = ClaimLoop(
            conn=conn,
            wake_conn=wake_conns[0],
            queue=name,
            inflight=inflight,
            room=room,
            pool=pool,
            counters=counters,
            claim_lease_ms=claim_lease_ms,
            worker=self.id,
            prefetch=self._prefetch(),
            sources=sources,
            turns=turns,
        )
        return _Parts(
            counters=counters,
            room=room,
            settler=settler,
            runners=runners,
            processes=processes,
            pool=pool,
            claims=claims,
            keeper=LeaseKeeper(conn, inflight, period),
            sweepers=tuple(
                Sweeper(
                    conn, one.name, config.recovery, config.recovery_interval, config.max_stalled
                )
                for one in queues
            ),
            escalator=Escalator(conn, inflight, retry=period / 2),
            watchdog=Watchdog(
                url=self.queue.url,
                queues=tuple(one.name for one in queues),
                worker_id=self.id,
                inflight=inflight,
                counters=functools.partial(attrs.asdict, counters),
                concurrency=config.concurrency,
                claim_lease_ms=claim_lease_ms,
                keeper_period=period,
                config=config,
            ),
            repeaters=tuple(
                Repeater(conn, one, feed) for one, feed in zip(queues, feeds, strict=True)
            )
            if config.scheduler
            else (),
        )

    async def _start_helpers(
        self, helpers: trio.Nursery, parts: _Parts, feeds: list[EventFeed]
    ) -> None:
        """The supervised helper loops (the claim loop starts last, on its own)."""
        supervise = self._supervisor.supervise
        if self.config.metrics_port is not None:
            await self._serve_metrics(helpers)
        several = len(self.queues) > 1
        loops = [("lease keeper", parts.keeper.run)]
        for i, one in enumerate(self.queues):
            feed, sweeper = feeds[i], parts.sweepers[i]
            of = f" ({one.name})" if several else ""  # a loop per queue says whose
            mine = one.name if several else None
            loops += [
                (
                    "cancel listener" + of,
                    functools.partial(follow_cancels, feed, self.inflight, mine),
                ),
                (
                    "schedule listener" + of,
                    functools.partial(follow_schedule, feed, parts.claims, mine),
                ),
                ("recovery" + of, sweeper.run),
                ("outbox relay" + of, sweeper.run_relay),
                ("outbox listener" + of, functools.partial(follow_outbox, feed, sweeper)),
            ]
            if parts.repeaters:
                loops.append(("repeat scheduler" + of, parts.repeaters[i].run))
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
