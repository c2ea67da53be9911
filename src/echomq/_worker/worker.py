"""``Worker.serve``: one nursery supervises the loops that run a queue's jobs.

Layout::

    serve
    ├── queue.open()              the command connection (shared) + the event feed
    ├── wake connection           the claims (BLPOP and the claim behind it when idle)
    ├── jobs nursery              slot tasks (slots.py), each in a nursery of its own, that
    │                             run the held jobs (execution.py); outlives the helpers
    └── helpers nursery           each supervised: crash -> logged -> restarted with backoff
        ├── claim loop            consumer.py
        ├── lease keeper          lease.py
        ├── recovery supervisor   sweeper.py
        ├── outbox relay          sweeper.py: flow children's outcomes to parents on other
        │                         queues, when nudged (``outbox`` on emq:{q}:control)
        ├── repeat scheduler      repeater.py (fires due repeatable runs; unless scheduler=off)
        ├── cancel listener       cancel events (emq:{q}:control) -> InFlight.request_cancel
        ├── escalator             a cancel's grace ran out: fence, stop hard (escalation.py)
        └── watchdog              a thread: heartbeat record, blocked loop (watchdog.py)

Start: until Redis answers, ``serve`` waits with backoff (startup.py), one log line per
attempt; a stop asked meanwhile ends it cleanly. Then the queue's data layout must be this
echomq's (``admin.ensure_schema``: marked if absent, ``SchemaMismatch`` if another).

Shutdown (``shutdown()``, or SIGINT/SIGTERM through ``run_worker``): stop claiming; hand
the prefetched jobs (claimed, not started: consumer.py rule 5) back to pending at once
with one fenced ``release``; wait up to ``grace`` seconds for held jobs (the lease keeper
keeps renewing them); cancel the rest and hand them back to pending at once with one
fenced ``release``; then stop the helpers. A second ``shutdown(grace=0)`` cuts the wait short.

A worker that fails (an error leaves ``serve``) is a crash: its started jobs are not handed
back uncounted, their leases are cut so that recovery collects them as stalls at once; its
prefetched jobs never started (not what failed it) and are handed back uncounted. Only a
stop asked for ends ``serve`` quietly: its jobs or helpers ending without one (a scope of
the worker's cancelled by code running in it) is such a failure too.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs
import trio

from .. import admin, jobs
from .._model.options import DEFAULT_LEASE, seconds, to_ms
from .._scripts import validate as v
from .._trio import open_service_nursery
from .._wire.dial import connect
from .._wire.interface import RedisConnection
from ..config import WorkerConfig, parse_url
from ..errors import TRANSIENT, InvalidArgument
from ..events import EventFeed, open_control_feed
from .cancellation import InFlight
from .consumer import Consumer
from .escalation import Escalator
from .execution import JobRunner
from .lease import LeaseKeeper
from .protocols import QUEUE_ATTRIBUTES, QueueSpec
from .repeater import Repeater
from .startup import wait_for_redis
from .supervise import Loop, Supervisor, is_crash
from .sweeper import Sweeper
from .watchdog import Watchdog, make_worker_id

__all__ = ["Worker", "WorkerStatistics"]

log = logging.getLogger("echomq.worker")

_RELEASE_TIMEOUT = 5.0
_CONFIG_FIELDS = frozenset(field.name for field in attrs.fields(WorkerConfig))


@attrs.frozen(kw_only=True)
class WorkerStatistics:
    """A snapshot of one worker."""

    queue: str
    concurrency: int
    held: int
    claimed: int
    completed: int
    failed: int
    retried: int
    cancelled: int
    lost: int
    released: int
    sweeps: int
    recovered: int
    dead_lettered: int
    helper_restarts: int
    claims: int  # claim calls made
    idle_waits: int  # waits on the wake list (the queue was empty or paused)
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
        self._runner: JobRunner | None = None
        self._sweeper: Sweeper | None = None
        self._keeper: LeaseKeeper | None = None  # reached by echomq.testing.freeze_renewal
        self._consumer: Consumer | None = None
        self._repeater: Repeater | None = None
        self._escalator: Escalator | None = None
        self._watchdog: Watchdog | None = None
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

    def statistics(self) -> WorkerStatistics:
        c = self._runner.counters if self._runner is not None else None
        return WorkerStatistics(
            queue=self.queue.name,
            concurrency=self.config.concurrency,
            held=len(self.inflight),
            claimed=c.claimed if c else 0,
            completed=c.completed if c else 0,
            failed=c.failed if c else 0,
            retried=c.retried if c else 0,
            cancelled=c.cancelled if c else 0,
            lost=c.lost if c else 0,
            released=c.released if c else 0,
            sweeps=self._sweeper.sweeps if self._sweeper else 0,
            recovered=self._sweeper.recovered if self._sweeper else 0,
            dead_lettered=self._sweeper.dead if self._sweeper else 0,
            helper_restarts=self._supervisor.restarts,
            claims=self._consumer.claims if self._consumer else 0,
            idle_waits=self._consumer.idle_waits if self._consumer else 0,
            stopping=self.stopping,
            prefetched=self._consumer.prefetched if self._consumer else 0,
            repeats_fired=self._repeater.fired if self._repeater else 0,
            repeats_raced=self._repeater.raced if self._repeater else 0,
            abandoned=c.abandoned if c else 0,
            terminated=c.terminated if c else 0,
            fenced=(self._escalator.fenced if self._escalator else 0)
            + (self._watchdog.fenced if self._watchdog else 0),
            blocks=self._watchdog.blocks if self._watchdog else 0,
            heartbeats=self._watchdog.beats if self._watchdog else 0,
            redis_stalls=self._watchdog.stalls if self._watchdog else 0,
            redis_unreachable=bool(self._watchdog and self._watchdog.unreachable_since is not None),
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
            async with trio.open_nursery() as outside:
                outside.start_soon(self._stop_when_cancelled)
                with trio.CancelScope(shield=True):
                    await self._serve_shielded(task_status)
                outside.cancel_scope.cancel()
        finally:
            self._serving = False

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
        claim_lease_ms, period = self._leases()
        runner = JobRunner(
            queue=self.queue,
            conn=conn,
            inflight=self.inflight,
            on_done=lambda n: None,
            settle_timeout=self.config.settle_timeout,
        )
        self._runner = runner
        keeper = self._keeper = LeaseKeeper(conn, name, self.inflight, period)
        sweeper = Sweeper(
            conn, name, self.config.recovery, self.config.recovery_interval, self.config.max_stalled
        )
        self._sweeper = sweeper
        escalator = self._escalator = Escalator(conn, name, self.inflight, retry=period / 2)
        watchdog = self._watchdog = Watchdog(
            url=self.queue.url,
            queue=name,
            worker_id=self.id,
            inflight=self.inflight,
            counters=lambda: attrs.asdict(runner.counters),
            concurrency=self.config.concurrency,
            claim_lease_ms=claim_lease_ms,
            keeper_period=period,
            config=self.config,
        )
        crashed = False
        consumer: Consumer | None = None
        try:
            async with trio.open_nursery() as jobs_nursery:
                consumer = Consumer(
                    conn=conn,
                    wake_conn=wake_conn,
                    queue=name,
                    inflight=self.inflight,
                    runner=runner,
                    jobs_nursery=jobs_nursery,
                    concurrency=self.config.concurrency,
                    claim_lease_ms=claim_lease_ms,
                    worker=self.id,
                    prefetch=self._prefetch(),
                )
                runner.on_done = consumer.slot_freed
                self._consumer = consumer
                async with trio.open_nursery() as helpers:
                    if self.config.metrics_port is not None:
                        await self._serve_metrics(helpers)
                    await helpers.start(
                        self._supervisor.supervise, "cancel listener", self._listen(feed)
                    )
                    await helpers.start(
                        self._supervisor.supervise,
                        "schedule listener",
                        self._watch_schedule(feed, consumer),
                    )
                    await helpers.start(self._supervisor.supervise, "lease keeper", keeper.run)
                    await helpers.start(self._supervisor.supervise, "recovery", sweeper.run)
                    await helpers.start(
                        self._supervisor.supervise, "outbox relay", sweeper.run_relay
                    )
                    await helpers.start(
                        self._supervisor.supervise, "outbox listener", self._nudges(feed, sweeper)
                    )
                    if self.config.scheduler:
                        self._repeater = Repeater(conn, self.queue, feed)
                        await helpers.start(
                            self._supervisor.supervise, "repeat scheduler", self._repeater.run
                        )
                    await helpers.start(self._supervisor.supervise, "escalator", escalator.run)
                    await helpers.start(self._supervisor.supervise, "watchdog", watchdog.run)
                    claiming = trio.CancelScope()
                    await helpers.start(self._claim_until_stopped, claiming, consumer)
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
                    await consumer.stop()
                    await self._release(conn, runner)  # the prefetched jobs, at once
                    claiming.cancel()
                    await self._drain()
                    consumer.slots.close()
                    helpers.cancel_scope.cancel()
                self._asked_to_stop()
            self._asked_to_stop()
        except BaseException as exc:
            crashed = is_crash(exc)
            raise
        finally:
            if crashed and consumer is not None:
                # prefetched jobs never started, so they are not what took the worker
                # down: handed back uncounted, the others left to recovery (counted)
                started, runner.to_release = runner.to_release, []
                consumer.give_back(unstarted=True)
                try:
                    await self._release(conn, runner)
                except Exception as exc:  # failing already: their leases lapse instead
                    log.error("worker failed: could not hand back its prefetched jobs (%s)", exc)
                runner.to_release = started
            elif consumer is not None:
                consumer.give_back(unstarted=True)  # prefetched jobs: with the others
            if crashed:
                await self._abandon(conn, runner)
            else:
                await self._release(conn, runner)
            await runner.processes.aclose()

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
        consumer: Consumer,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        with claiming:
            await self._supervisor.supervise("claim loop", consumer.run, task_status=task_status)
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

    async def _release(self, conn: RedisConnection, runner: JobRunner) -> None:
        """Hand unsettled jobs back to pending at once (fenced; no count)."""
        pending = runner.to_release
        if not pending:
            return
        runner.to_release = []
        with trio.CancelScope(shield=True), trio.move_on_after(_RELEASE_TIMEOUT):
            try:
                answers: dict[str, str] = {}
                for start in range(0, len(pending), v.MAX_HELD):  # the verb's cap per call
                    chunk = pending[start : start + v.MAX_HELD]
                    answers.update(await jobs.release(conn, self.queue.name, chunk))
            except TRANSIENT as exc:
                log.error(
                    "shutdown: could not hand back %d job(s) (%s); recovery will return them",
                    len(pending),
                    exc,
                )
                return
            released = [job_id for job_id, answer in answers.items() if answer == "ok"]
            runner.counters.released += len(released)
            log.info("shutdown: handed %d job(s) back to pending", len(released))

    async def _abandon(self, conn: RedisConnection, runner: JobRunner) -> None:
        """The worker failed: leave held jobs to recovery as crashed (counted as stalls).

        Their leases are cut to 1 ms, so the next sweep (any worker's, or this one's when
        it restarts) collects them at once and counts them, as it would after a SIGKILL:
        a job that takes its worker down is bounded by ``max_stalled``. Nothing is
        handed back uncounted.
        """
        held = runner.to_release
        if not held:
            return
        runner.to_release = []
        with trio.CancelScope(shield=True), trio.move_on_after(_RELEASE_TIMEOUT):
            try:
                await jobs.extend_locks(conn, self.queue.name, held, 1)
            except Exception as exc:  # the worker is failing already; recovery still runs
                log.error(
                    "worker failed: could not cut the leases of %d job(s) (%s); they return "
                    "when their leases lapse",
                    len(held),
                    exc,
                )
                return
        log.error(
            "worker failed holding %d job(s): left to recovery as stalled (counted)", len(held)
        )

    def _listen(self, feed: EventFeed) -> Loop:
        async def listen(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            with feed.listen(events=("cancel",), buffer=4096) as events:
                task_status.started()
                async for event in events:
                    if event.job is not None:
                        reason = event.fields.get("reason")
                        grace = event.fields.get("grace_ms")
                        fenced = event.fields.get("fenced") is True
                        found = self.inflight.request_cancel(
                            event.job,
                            reason if isinstance(reason, str) else None,
                            grace=grace / 1000 if isinstance(grace, int | float) else None,
                            fenced=fenced,
                        )
                        if found and fenced:
                            log.warning(
                                "job %s: fenced (its cancel grace ran out): stopping it hard",
                                event.job,
                            )
                        elif found:
                            log.info("job %s: cancel requested (%s)", event.job, reason)

        return listen

    def _nudges(self, feed: EventFeed, sweeper: Sweeper) -> Loop:
        """A flow child whose parent is on another queue finished here: relay it now."""

        async def nudges(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            with feed.listen(events=("outbox",), buffer=64) as events:
                task_status.started()
                async for _ in events:
                    sweeper.relay_soon()

        return nudges

    def _watch_schedule(self, feed: EventFeed, consumer: Consumer) -> Loop:
        async def watch(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            with feed.listen(events=("scheduled", "retrying"), buffer=1024) as events:
                task_status.started()
                async for event in events:
                    delay_ms = event.fields.get("delay_ms")
                    due_in = delay_ms / 1000 if isinstance(delay_ms, int | float) else None
                    if event.event == "retrying" and not due_in:
                        continue  # retried at once: the script pushed a wake token
                    try:
                        await consumer.scheduled(due_in)
                    except TRANSIENT:
                        pass  # the idle cap still bounds the wait

        return watch
