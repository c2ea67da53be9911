"""Read-only views of queues for the dashboard: counts, active and dead jobs, throughput.

Rule 1: nothing here writes to Redis. Counts come from ``admin.stats`` (one atomic read);
the job lists are plain reads with keys from :class:`Keyspace` only; queue names
found by SCAN are accepted only if ``Keyspace(name).meta`` gives back the key found.
Rule 2: throughput is computed from deltas of the metrics counters (``count`` on
``metrics:completed`` and ``metrics:failed``) between polls, on the server clock, so every
dashboard and every worker agree. ``failed`` counts jobs that ended dead; a failure that
retries is not in it (it appears as a ``retrying`` event).
"""

from __future__ import annotations

import collections
import json
from collections.abc import Mapping
from typing import Any

import trio

from .. import admin
from .._model.codec import JSON
from .._model.text import raw_text
from .._redis.connection import Connection
from .._redis.keyspace import Keyspace, check_queue, queues_pattern
from ..admin import QueueStats
from ..errors import SerializationError, ServerError
from .messages import ActiveJob, DeadJob, QueueView, RecentFailure

__all__ = [
    "COUNT_NAMES",
    "FailureLog",
    "Throughput",
    "discover_queues",
    "read_queue",
    "server_now_ms",
]


#: The states counted per queue, in the order the page shows them.
COUNT_NAMES = ("pending", "active", "scheduled", "dead", "completed")
CALL_PREVIEW = 120


async def _read_many(conn: Connection, commands: list[tuple[Any, ...]]) -> list[Any]:
    """Read-only commands in one write (``execute_pipeline``); an error reply raises."""
    replies = await conn.execute_pipeline(commands)
    for reply in replies:
        if isinstance(reply, ServerError):
            raise reply
    return replies


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def describe_payload(payload: bytes | None) -> tuple[str, str]:
    """``(task, call preview)`` of a payload, e.g. ``("send", "send('a@b.c', n=2)")``.

    A payload that is not an echomq call (not UTF-8, not JSON, nested too deeply) is
    ``("?", raw preview)`` with its bytes escaped (``\\xff``).
    """
    if not payload:
        return "?", ""
    raw = raw_text(payload[:CALL_PREVIEW])  # a cut multi-byte character shows escaped
    try:
        call = JSON.decode_call(payload)
        parts = [json.dumps(a, ensure_ascii=False) for a in call.args]
        parts += [f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in call.kwargs.items()]
    except (SerializationError, RecursionError, ValueError, TypeError):
        return "?", raw  # undecodable (or too deep to show): the raw bytes, never an error
    preview = f"{call.task}({', '.join(parts)})"
    if len(preview) > CALL_PREVIEW:
        preview = preview[: CALL_PREVIEW - 1] + "…"
    return call.task, preview


async def server_now_ms(conn: Connection) -> int:
    """The server clock in milliseconds (the clock leases are scored on)."""
    seconds, micros = await conn.execute("TIME")
    return int(seconds) * 1000 + int(micros) // 1000


async def discover_queues(conn: Connection, *, limit: int = 200) -> list[str]:
    """Names of the queues that have a meta hash, sorted; at most ``limit``."""
    pattern = queues_pattern()
    found: set[str] = set()
    cursor = b"0"
    while True:
        cursor, keys = await conn.execute("SCAN", cursor, "MATCH", pattern, "COUNT", 500)
        for key in keys:
            name = _queue_of(_text(key) or "")
            if name is not None:
                found.add(name)
        if cursor in (b"0", 0, "0") or len(found) >= limit:
            break
    return sorted(found)[:limit]


def _queue_of(meta_key: str) -> str | None:
    """The queue whose meta key this is, or None (checked by building it back)."""
    start, end = meta_key.find("{"), meta_key.rfind("}")
    if start < 0 or end <= start:
        return None
    name = meta_key[start + 1 : end]
    try:
        return name if Keyspace(name).meta == meta_key else None
    except ValueError:
        return None


def _pairs(flat: list[Any]) -> list[tuple[str, int]]:
    return [(_text(flat[i]) or "", int(float(flat[i + 1]))) for i in range(0, len(flat), 2)]


async def _active_jobs(conn: Connection, ks: Keyspace, limit: int) -> list[ActiveJob]:
    members = _pairs(await conn.execute("ZRANGE", ks.active, 0, limit - 1, "WITHSCORES"))
    fields = ("payload", "attempts", "progress", "claimed_at")
    rows = await _read_many(
        conn,
        [("HMGET", ks.job(j), *fields) for j, _ in members]
        + [("LINDEX", ks.logs(j), -1) for j, _ in members],
    )
    jobs = []
    for i, (job_id, deadline) in enumerate(members):
        payload, attempts, progress, claimed_at = rows[i]
        task, call = describe_payload(payload)
        jobs.append(
            ActiveJob(
                id=job_id,
                task=task,
                call=call,
                attempts=_int(attempts),
                progress=_text(progress),
                lease_deadline_ms=deadline,
                claimed_at_ms=_int(claimed_at) or None,
                last_log=_text(rows[len(members) + i]),
            )
        )
    return jobs


async def _dead_jobs(conn: Connection, ks: Keyspace, limit: int, log_lines: int) -> list[DeadJob]:
    members = _pairs(await conn.execute("ZREVRANGE", ks.dead, 0, limit - 1, "WITHSCORES"))
    fields = ("payload", "failures", "last_error", "finished_at")
    rows = await _read_many(
        conn,
        [("HMGET", ks.job(j), *fields) for j, _ in members]
        + [("LRANGE", ks.logs(j), -log_lines, -1) for j, _ in members],
    )
    jobs = []
    for i, (job_id, died_at) in enumerate(members):
        payload, failures, last_error, finished_at = rows[i]
        task, call = describe_payload(payload)
        jobs.append(
            DeadJob(
                id=job_id,
                task=task,
                call=call,
                failures=_int(failures),
                last_error=_text(last_error),
                finished_at_ms=_int(finished_at) or died_at,
                logs=[_text(line) or "" for line in rows[len(members) + i]],
            )
        )
    return jobs


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
        sample = (now, counts.completed_total, counts.failed_total)
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
) -> QueueView:
    """One queue's view; also feeds its totals into ``throughput``."""
    ks = Keyspace(check_queue(queue))
    counts: QueueStats | None = None
    active: list[ActiveJob] = []
    dead: list[DeadJob] = []

    async def read_counts() -> None:
        nonlocal counts
        counts = await admin.stats(conn, queue)

    async def read_active() -> None:
        active.extend(await _active_jobs(conn, ks, active_limit))

    async def read_dead() -> None:
        dead.extend(await _dead_jobs(conn, ks, dead_limit, log_lines))

    async with trio.open_nursery() as nursery:
        for reader in (read_counts, read_active, read_dead):
            nursery.start_soon(reader)
    assert counts is not None
    throughput.add(counts)
    return QueueView(
        name=queue,
        paused=counts.paused,
        counts={name: getattr(counts, name) for name in COUNT_NAMES},
        totals={"completed": counts.completed_total, "failed": counts.failed_total},
        throughput=throughput.series(queue),
        active=active,
        dead=dead,
        failures=failures.recent(queue),
    )
