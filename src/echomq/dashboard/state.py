"""Read-only views of queues for the dashboard: counts, active and dead jobs, throughput.

Rule 1: nothing here writes to Redis, and nothing here sends a Redis command: counts come
from ``admin.stats`` (one atomic read), the job lists from ``admin.active_jobs`` and
``admin.dead_jobs``, the repeatables from ``repeat.list_repeats``, the workers from
``admin.list_workers``, the per-group counts from ``admin.groups``, the queues from
``admin.list_queues`` (the verbs the CLI uses too).
Rule 2: throughput comes from counters, never from the retained rows (which retention
trims): the live rate (jobs per second) from deltas of the totals (``count`` on
``metrics:completed`` and ``metrics:dead``) between polls, on the server clock, and the
last hour by the minute from the per-minute counters (``metrics:<outcome>:<minute>``),
both read by ``admin.stats``. ``failed`` / ``dead`` count jobs that ended dead; a failure
that retries is not in them (it appears as a ``retrying`` event).
"""

from __future__ import annotations

import collections
import json
from collections.abc import Mapping
from typing import Any

import trio

from .. import admin, repeat
from .._model.codec import peek_call
from .._model.flow import split_payload
from .._model.text import raw_text
from .._scripts.keyspace import check_queue
from .._wire.connection import Connection
from ..admin import QueueStats
from ..errors import SerializationError
from .messages import (
    ActiveJob,
    DeadJob,
    GroupCount,
    QueueView,
    RecentFailure,
    RepeatItem,
    WorkerInfo,
)

__all__ = [
    "COUNT_NAMES",
    "FailureLog",
    "Throughput",
    "discover_queues",
    "read_queue",
    "server_now_ms",
]


#: The states counted per queue, in the order the page shows them.
COUNT_NAMES = ("pending", "active", "scheduled", "dead", "completed", "cancelled")
CALL_PREVIEW = 120
PER_MINUTE = 60  # minutes of per-minute counts a view carries (the current one included)


def describe_payload(payload: bytes | None) -> tuple[str, str]:
    """``(task, call preview)`` of a payload, e.g. ``("send", "send('a@b.c', n=2)")``.

    Either codec's call is shown, its tagged values as their tag objects (no class is
    looked up: ``codec.peek_call``). A payload that is not an echomq call (not UTF-8,
    not JSON or msgpack, nested too deeply) is ``("?", raw preview)`` with its bytes
    escaped (``\\xff``).
    """
    if not payload:
        return "?", ""
    payload = split_payload(payload)[1]  # a flow parent's mark (docs/flows.md)
    raw = raw_text(payload[:CALL_PREVIEW])  # a cut multi-byte character shows escaped
    try:
        call = peek_call(payload)
        parts = [json.dumps(a, ensure_ascii=False, default=repr) for a in call.args]
        parts += [
            f"{k}={json.dumps(v, ensure_ascii=False, default=repr)}" for k, v in call.kwargs.items()
        ]
    except (SerializationError, RecursionError, ValueError, TypeError):
        return "?", raw  # undecodable (or too deep to show): the raw bytes, never an error
    preview = f"{call.task}({', '.join(parts)})"
    if len(preview) > CALL_PREVIEW:
        preview = preview[: CALL_PREVIEW - 1] + "…"
    return call.task, preview


async def server_now_ms(conn: Connection) -> int:
    """The server clock in milliseconds (the clock leases are scored on)."""
    return await admin.server_now_ms(conn)


async def discover_queues(conn: Connection, *, limit: int = 200) -> list[str]:
    """Names of the queues (every ``emq:{q}:meta``, every master), sorted; at most ``limit``."""
    return await admin.list_queues(conn, limit=limit)


def _active_job(row: admin.ActiveRow) -> ActiveJob:
    task, call = describe_payload(row.payload)
    return ActiveJob(
        id=row.id,
        task=task,
        call=call,
        token=row.token,
        progress=row.progress,
        lease_deadline_ms=row.lease_deadline_ms,
        claimed_at_ms=row.claimed_at_ms,
        last_log=row.last_log,
    )


def _dead_job(row: admin.DeadRow) -> DeadJob:
    task, call = describe_payload(row.payload)
    return DeadJob(
        id=row.id,
        task=task,
        call=call,
        failures=row.failures,
        last_error=row.last_error,
        finished_at_ms=row.died_at_ms,
        logs=row.logs,
    )


def _worker(w: admin.WorkerRecord) -> WorkerInfo:
    status = "gone" if not w.alive else "blocked" if w.blocked else "running"
    return WorkerInfo(
        id=w.id,
        status=status,
        host=w.host,
        pid=w.pid,
        version=w.version,
        concurrency=w.concurrency,
        held=w.held,
        completed=w.counters.get("completed", 0),
        failed=w.counters.get("failed", 0),
        started_at_ms=w.started_at_ms,
        last_beat_ms=w.last_beat_ms,
        blocked_since_ms=w.blocked_since_ms,
        blocked_task=w.blocked_task,
        blocked_job=w.blocked_job,
        unreachable_ms=w.unreachable_ms,
        unreachable_until_ms=w.unreachable_until_ms,
    )


class Throughput:
    """Per-queue rates (jobs per second) from successive metrics totals.

    Each poll adds one point per queue: the counter's growth since the sample about
    ``window`` seconds earlier (or the oldest one kept), divided by the seconds between
    them, on the server clock: a moving average that does not zig-zag with bursty
    producers. A counter that went down (an obliterated queue) restarts the window.
    """

    def __init__(self, history: int, window: float = 5.0) -> None:
        self.history = history
        self.window_ms = int(window * 1000)
        self._samples: dict[str, collections.deque[tuple[int, int, int]]] = {}
        self._series: dict[str, tuple[collections.deque[float], collections.deque[float]]] = {}

    def add(self, counts: QueueStats) -> None:
        now = counts.now_ms
        sample = (now, counts.completed_total, counts.dead_total)
        samples = self._samples.setdefault(counts.queue, collections.deque())
        done, failed = self._series.setdefault(
            counts.queue,
            (collections.deque(maxlen=self.history), collections.deque(maxlen=self.history)),
        )
        if samples and (sample[1] < samples[-1][1] or sample[2] < samples[-1][2]):
            samples.clear()  # the counters were reset
        if samples and now <= samples[-1][0]:
            return
        samples.append(sample)
        while len(samples) > 2 and now - samples[1][0] >= self.window_ms:
            samples.popleft()
        if len(samples) < 2:
            if done or failed:
                done.append(0.0)
                failed.append(0.0)
            return
        first = samples[0]
        seconds = (now - first[0]) / 1000
        done.append(round((sample[1] - first[1]) / seconds, 2))
        failed.append(round((sample[2] - first[2]) / seconds, 2))

    def series(self, queue: str) -> dict[str, list[float]]:
        done, failed = self._series.get(queue, ((), ()))
        return {"completed": list(done), "failed": list(failed)}


class FailureLog:
    """The latest failures seen on each queue's event channel, newest first."""

    def __init__(self, keep: int = 30) -> None:
        self.keep = keep
        self._items: dict[str, collections.deque[RecentFailure]] = {}

    def note(self, queue: str, event: Mapping[str, Any], at_ms: int) -> None:
        kind = event.get("event")
        if kind not in ("retrying", "dead") or not isinstance(event.get("job"), str):
            return
        error = event.get("error")
        items = self._items.setdefault(queue, collections.deque(maxlen=self.keep))
        items.appendleft(
            RecentFailure(
                job=event["job"],
                outcome=str(kind),
                error=str(error) if error is not None else None,
                at_ms=at_ms,
            )
        )

    def recent(self, queue: str) -> list[RecentFailure]:
        return list(self._items.get(queue, ()))


async def read_queue(
    conn: Connection,
    queue: str,
    *,
    throughput: Throughput,
    failures: FailureLog,
    active_limit: int = 50,
    dead_limit: int = 20,
    log_lines: int = 10,
    repeat_limit: int = 50,
    worker_limit: int = 50,
    group_limit: int = 20,
) -> QueueView:
    """One queue's view; also feeds its totals into ``throughput``."""
    check_queue(queue)
    counts: QueueStats | None = None
    active: list[ActiveJob] = []
    dead: list[DeadJob] = []
    repeats: list[RepeatItem] = []
    workers: list[WorkerInfo] = []
    groups: list[GroupCount] = []

    async def read_counts() -> None:
        nonlocal counts
        counts = await admin.stats(conn, queue, minutes=PER_MINUTE)

    async def read_active() -> None:
        rows = await admin.active_jobs(conn, queue, limit=active_limit)
        active.extend(_active_job(row) for row in rows)

    async def read_dead() -> None:
        rows = await admin.dead_jobs(conn, queue, limit=dead_limit, log_lines=log_lines)
        dead.extend(_dead_job(row) for row in rows)

    async def read_repeats() -> None:
        listing = await repeat.list_repeats(conn, queue, limit=repeat_limit)
        repeats.extend(
            RepeatItem(
                key=info.key,
                task=info.task,
                schedule=info.schedule.describe(),
                paused=info.paused,
                upcoming_ms=info.upcoming(3),
                runs=info.runs,
                last_job=info.last_job,
                missed=info.missed,
            )
            for info in listing.records
        )

    async def read_workers() -> None:
        found = await admin.list_workers(conn, queue, limit=worker_limit)
        workers.extend(_worker(w) for w in found.workers)

    async def read_groups() -> None:
        rows = await admin.groups(conn, queue, limit=group_limit)
        groups.extend(_group_count(row) for row in rows)

    async with trio.open_nursery() as nursery:
        for reader in (
            read_counts,
            read_active,
            read_dead,
            read_repeats,
            read_workers,
            read_groups,
        ):
            nursery.start_soon(reader)
    assert counts is not None
    throughput.add(counts)
    return QueueView(
        name=queue,
        paused=counts.paused,
        counts={name: getattr(counts, name) for name in COUNT_NAMES},
        totals={
            "completed": counts.completed_total,
            "dead": counts.dead_total,
            "cancelled": counts.cancelled_total,
            "expired": counts.expired_total,  # kept in the dead index: counted in `dead`
        },
        throughput=throughput.series(queue),
        active=active,
        dead=dead,
        failures=failures.recent(queue),
        per_minute={
            "completed": list(counts.completed_per_minute),
            "dead": list(counts.dead_per_minute),
            "cancelled": list(counts.cancelled_per_minute),
        },
        capped=counts.capped.total,
        repeats=repeats,
        workers=workers,
        groups=groups,
        group_total=counts.groups,
    )


def _group_count(row: admin.GroupRow) -> GroupCount:
    if row.at_limit:
        standing = "limit"
    elif row.limited_until_ms is not None:
        standing = "rate"
    elif row.in_ring:
        standing = "turn"
    else:
        standing = "idle"
    return GroupCount(
        name=row.name, waiting=row.waiting, active=row.active, limit=row.limit, standing=standing
    )
