"""Prometheus ``/metrics`` for a worker (``--metrics-port``) and the queue gauges the
dashboard serves too, in the text format of the official ``prometheus-client``.

Rule 1: nothing is counted here. At each scrape the families are built from the numbers
the runtime keeps anyway (``tally.py``, the lease keeper's and the sweeper's counters,
``Worker.statistics()``) and from one ``admin.stats`` read per queue (queue depth); a
worker whose metrics nobody scrapes pays nothing but its plain counters.
Rule 2: one registry per worker (never the library's global one), so several workers in
one process each serve their own.
Rule 3: the server is the dashboard's (``echomq._http``: trio and h11, one request per
connection, its limits and its Host check): ``GET /metrics`` answers the text format,
``GET /`` a line saying where to look, anything else 404. A failing scrape (Redis down)
still answers: the queue gauges are left out and ``echomq_queue_scrape_ok`` is 0.
Rule 4: the Host check (DNS rebinding): loopback names, the bound address, the
``allowed_hosts`` given; bound to every interface (``0.0.0.0``), also any IP address and
this machine's host name, as a remote Prometheus names a target. Any other Host is 421.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from functools import partial
from typing import TYPE_CHECKING

import trio
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector, CollectorRegistry

from .. import admin
from .._http import WILDCARDS, HostRule, Request, check_allowed_host, serve_http
from ..admin import QueueStats
from ..errors import EchoMQError, InvalidArgument
from .tally import BUCKETS, WAIT_BUCKETS, Tally

if TYPE_CHECKING:
    from .worker import Worker

__all__ = [
    "WorkerCollector",
    "metrics_hosts",
    "queue_families",
    "render",
    "serve_metrics",
    "worker_registry",
]

log = logging.getLogger("echomq.metrics")

STATES = ("pending", "scheduled", "active", "completed", "dead", "cancelled")
_READ_TIMEOUT = 10.0


def queue_families(stats: Sequence[QueueStats], ok: bool = True) -> list[Metric]:
    """Depth per state, the gate and the completion totals of each queue (one read each)."""
    depth = GaugeMetricFamily(
        "echomq_queue_jobs", "Jobs in each state, read at scrape time", labels=["queue", "state"]
    )
    paused = GaugeMetricFamily("echomq_queue_paused", "1 when claiming is paused", labels=["queue"])
    completed = CounterMetricFamily(
        "echomq_queue_completed", "Jobs completed since the queue's metrics began", labels=["queue"]
    )
    failed = CounterMetricFamily(
        "echomq_queue_dead",
        "Jobs dead-lettered since the queue's metrics began",
        labels=["queue"],
    )
    cancelled = CounterMetricFamily(
        "echomq_queue_cancelled",
        "Jobs cancelled since the queue's metrics began",
        labels=["queue"],
    )
    expired = CounterMetricFamily(
        "echomq_queue_expired",
        "Jobs expired (not started by their deadline) since the queue's metrics began",
        labels=["queue"],
    )
    for s in stats:
        for state in STATES:
            depth.add_metric([s.queue, state], getattr(s, state))
        paused.add_metric([s.queue], 1 if s.paused else 0)
        completed.add_metric([s.queue], s.completed_total)
        failed.add_metric([s.queue], s.dead_total)
        cancelled.add_metric([s.queue], s.cancelled_total)
        expired.add_metric([s.queue], s.expired_total)
    scrape = GaugeMetricFamily(
        "echomq_queue_scrape_ok", "1 when the queue gauges could be read from Redis"
    )
    scrape.add_metric([], 1 if ok else 0)
    return [depth, paused, completed, failed, cancelled, expired, scrape]


def task_families(tallies: Sequence[tuple[str, Tally]]) -> list[Metric]:
    """Jobs by task and outcome, retries, and the run-time histogram of each task, of each
    ``(queue, tally)`` (one family each, a sample per queue and task)."""
    jobs = CounterMetricFamily(
        "echomq_jobs",
        "Finished attempts run by this worker, by task and outcome",
        labels=["queue", "task", "outcome"],
    )
    retries = CounterMetricFamily(
        "echomq_retries",
        "Failed attempts scheduled for a retry (the jobs outcome 'retried')",
        labels=["queue", "task"],
    )
    runs = HistogramMetricFamily(
        "echomq_job_run_seconds",
        "The handler's run time, by task",
        labels=["queue", "task"],
        unit="",
    )
    waits = HistogramMetricFamily(
        "echomq_job_wait_seconds",
        "Time from a job's due time (its enqueue, or its run_at: a delayed job, a retry; "
        "server clock) to its start on this worker, by task",
        labels=["queue", "task"],
        unit="",
    )
    for queue, tally in tallies:
        for task, t in sorted(tally.tasks.items()):
            for outcome, count in t.outcomes.items():
                jobs.add_metric([queue, task, outcome], count)
            retries.add_metric([queue, task], t.outcomes["retried"])
            runs.add_metric([queue, task], _cumulative(BUCKETS, t.buckets), t.seconds)
            if any(t.wait_buckets):
                waits.add_metric([queue, task], _cumulative(WAIT_BUCKETS, t.wait_buckets), t.waited)
    return [jobs, retries, runs, waits]


def _cumulative(bounds: Sequence[float], counts: Sequence[int]) -> list[tuple[str, float]]:
    cumulative, buckets = 0, []
    for bound, count in zip((*bounds, float("inf")), counts, strict=True):
        cumulative += count
        buckets.append((_le(bound), float(cumulative)))
    return buckets


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


class WorkerCollector(Collector):
    """A worker's families (rule 1): call :meth:`refresh` (one ``admin.stats``) before
    each ``generate_latest``."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.stats: list[QueueStats] = []  # each queue's it serves
        self.stats_ok = False

    async def refresh(self) -> None:
        """Read the queue's gauges now (at most ``_READ_TIMEOUT`` seconds)."""
        self.stats_ok = False
        with trio.move_on_after(_READ_TIMEOUT):
            try:
                self.stats = [
                    await admin.stats(queue.connection, queue.name) for queue in self.worker.queues
                ]
                self.stats_ok = True
            except (EchoMQError, RuntimeError) as exc:  # Redis down, or not serving yet
                log.warning("metrics: queue gauges not read (%s)", exc)

    def collect(self) -> Iterable[Metric]:
        worker = self.worker
        name = worker.queue.name
        s = worker.statistics()
        up = GaugeMetricFamily(
            "echomq_worker_up", "1 while the worker serves (0 once it stops)", labels=["queue"]
        )
        up.add_metric([name], 0 if s.stopping else 1)
        held = GaugeMetricFamily("echomq_worker_held_jobs", "Jobs held now", labels=["queue"])
        held.add_metric([name], s.held)
        prefetched = GaugeMetricFamily(
            "echomq_worker_prefetched_jobs",
            "Held jobs claimed ahead, waiting for a slot (counted in held_jobs too)",
            labels=["queue"],
        )
        prefetched.add_metric([name], s.prefetched)
        slots = GaugeMetricFamily(
            "echomq_worker_concurrency", "Jobs run at most at once", labels=["queue"]
        )
        slots.add_metric([name], s.concurrency)
        keeper = worker._keeper
        renewals = CounterMetricFamily(
            "echomq_lease_renewals", "Leases renewed by the lease keeper", labels=["queue"]
        )
        renewals.add_metric([name], keeper.renewed if keeper is not None else 0)
        lost = CounterMetricFamily(
            "echomq_leases_lost", "Jobs whose lease was lost while held", labels=["queue"]
        )
        lost.add_metric([name], s.lost)
        stalls = CounterMetricFamily(
            "echomq_stalled_jobs",
            "Expired leases this worker's recovery sweeps found, by what became of the job",
            labels=["queue", "outcome"],
        )
        stalls.add_metric([name, "recovered"], s.recovered)
        stalls.add_metric([name, "dead"], s.dead_lettered)
        sweeps = CounterMetricFamily(
            "echomq_recovery_sweeps", "Recovery sweeps this worker ran", labels=["queue"]
        )
        sweeps.add_metric([name], s.sweeps)
        restarts = CounterMetricFamily(
            "echomq_worker_helper_restarts",
            "Helper loops restarted after a crash",
            labels=["queue"],
        )
        restarts.add_metric([name], s.helper_restarts)
        hook_errors = CounterMetricFamily(
            "echomq_hook_errors",
            "Hooks that raised or timed out (their jobs' outcomes unchanged), by hook",
            labels=["queue", "hook"],
        )
        for queue in worker.queues:  # each queue's hooks
            hooks = getattr(queue, "hooks", None)
            if hooks is not None:
                for hook, count in sorted(hooks.errors.counts.items()):
                    hook_errors.add_metric([queue.name, hook], count)
        yield from (up, held, prefetched, slots, renewals, lost, stalls, sweeps, restarts)
        yield hook_errors
        yield from task_families([(q.name, worker._tally(q.name)) for q in worker.queues])
        yield from queue_families(self.stats if self.stats_ok else [], self.stats_ok)


def render(registry: CollectorRegistry, accept: str | None = None) -> tuple[bytes, str]:
    """The registry in the format the scraper's ``Accept`` header asks for (the
    library's negotiation: the Prometheus text format 0.0.4 by default, OpenMetrics when
    asked); answers the body and its content type."""
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry), content_type


def metrics_hosts(host: str, allowed_hosts: Sequence[str] = ()) -> HostRule:
    """The Host rule of a metrics port bound to ``host`` (rule 4).

    Raises:
        InvalidArgument: an allowed host that is not a host name or address.
    """
    allowed = {check_allowed_host(name) for name in allowed_hosts}
    wildcard = host in WILDCARDS
    if wildcard:
        try:
            allowed.add(check_allowed_host(socket.gethostname()))
        except InvalidArgument:
            pass  # a host name no Host header could carry (an underscore): nothing to add
    return HostRule(bind_host=host, allowed=frozenset(allowed), any_address=wildcard)


async def serve_metrics(
    host: str,
    port: int,
    body: Callable[[str | None], Awaitable[tuple[bytes, str]]],
    *,
    allowed_hosts: Sequence[str] = (),
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``GET /metrics`` on ``host:port`` until cancelled (``await body(accept)``
    answers the bytes and their content type); ``started`` with the bound port
    (``port=0``: any free one). ``allowed_hosts``: names a scraper may give in ``Host``
    besides those of rule 4.

    Raises:
        InvalidArgument: a bad allowed host, before any I/O.
        OSError: the address cannot be bound (a port in use): at start, before ``started``.
    """
    hosts = metrics_hosts(host, allowed_hosts)
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound: int = listeners[0].socket.getsockname()[1]

    async def answer(request: Request) -> None:
        path = request.head.path
        if path == "/metrics":
            content, kind = await body(request.head.headers.get("accept"))
            await request.respond(200, content, content_type=kind)
        elif path == "/":
            await request.respond(200, b"echomq worker: see /metrics\n")
        else:
            await request.respond(404, b"not found\n")

    async with trio.open_nursery() as nursery:
        await nursery.start(partial(serve_http, answer, listeners, hosts=hosts, log=log))
        task_status.started(bound)
        log.info("metrics on http://%s:%d/metrics", host, bound)


def worker_registry(worker: Worker) -> tuple[CollectorRegistry, WorkerCollector]:
    """A registry of its own holding the worker's collector and the client library's
    process, platform and garbage-collector collectors (rule 2: ``process_*``, ``python_*``
    of this process; under ``--processes`` each child serves its own)."""
    registry = CollectorRegistry(auto_describe=False)
    collector = WorkerCollector(worker)
    registry.register(collector)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry, collector
