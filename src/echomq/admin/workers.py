"""Workers as records (docs/runtime.md, "Workers"): each worker's heartbeat, and the list.

Rule 1: a worker writes its record with :func:`beat` every heartbeat: a hash
``emq:{q}:worker:<id>`` with a TTL of a few beats, and its entry in ``emq:{q}:workers``
(a zset scored by the last beat, server clock). A worker that stops cleanly removes both
(:func:`forget`); one that dies leaves its entry, and its record expires: it is *gone*.
Rule 2: the record's shape is :class:`WorkerBeat` (what a worker says of itself) and
:class:`WorkerRecord` (what a reader gets back: the beat plus the server's times). Times
are the server's (the script writes ``last_beat``, ``started_at``, ``blocked_since`` from
durations the worker sends), so every reader compares them with one clock.
Rule 3: :func:`list_workers` answers the newest records first, gone ones included for a
while (``keep_gone``), and prunes the entries of workers gone longer than that.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from .._scripts import validate as v
from .._scripts.calls import Executor, ScriptCall, evaluate, script_call
from .._scripts.keyspace import Keyspace, check_id
from .._scripts.replies import text
from ..errors import InvalidArgument, ScriptError

__all__ = [
    "COUNTERS",
    "DEFAULT_KEEP_GONE_MS",
    "MAX_RUNNING_LISTED",
    "WorkerBeat",
    "WorkerList",
    "WorkerRecord",
    "beat",
    "beat_call",
    "forget",
    "forget_call",
    "list_workers",
    "list_workers_call",
]

#: the counters a record carries (``Worker.statistics()`` names)
COUNTERS = (
    "claimed",
    "completed",
    "failed",
    "retried",
    "cancelled",
    "lost",
    "abandoned",
    "terminated",
)
MAX_RUNNING_LISTED = 50  # job ids a record lists (``held`` counts them all)
DEFAULT_KEEP_GONE_MS = 3_600_000  # a gone worker stays listed for an hour after its last beat


def _join(values: tuple[str, ...]) -> str:
    return ",".join(values)


@attrs.frozen(kw_only=True)
class WorkerBeat:
    """What a worker says of itself in one heartbeat (no times: the server adds them).

    ``blocked_task`` / ``blocked_job``: what its event loop is stuck in, when blocked.
    ``unreachable_ms`` / ``unreachable_ago_ms``: how long Redis did not answer its
    heartbeats, and how long ago that ended (0: it goes on), after an outage lately.
    """

    host: str
    pid: int
    version: str
    queues: tuple[str, ...]
    concurrency: int
    lease_ms: int  # the claim lease (the longest of its tasks)
    beat_ms: int  # the heartbeat interval
    held: int
    running: tuple[str, ...] = ()  # at most MAX_RUNNING_LISTED ids
    counters: Mapping[str, int] = attrs.field(factory=dict)
    blocked_task: str | None = None
    blocked_job: str | None = None
    unreachable_ms: int | None = None
    unreachable_ago_ms: int | None = None

    def fields(self) -> list[str]:
        """The record's field, value pairs, flat."""
        pairs: dict[str, object] = {
            "host": self.host,
            "pid": self.pid,
            "version": self.version,
            "queues": _join(self.queues),
            "concurrency": self.concurrency,
            "lease_ms": self.lease_ms,
            "beat_ms": self.beat_ms,
            "held": self.held,
            "running": _join(self.running[:MAX_RUNNING_LISTED]),
        }
        for name in COUNTERS:
            pairs[name] = int(self.counters.get(name, 0))
        if self.blocked_task is not None:
            pairs["blocked_task"] = self.blocked_task
        if self.blocked_job is not None:
            pairs["blocked_job"] = self.blocked_job
        if self.unreachable_ms is not None:
            pairs["unreachable_ms"] = self.unreachable_ms
            pairs["unreachable_ago_ms"] = self.unreachable_ago_ms or 0
        return [str(x) for pair in pairs.items() for x in pair]


def _int(row: Mapping[str, str], name: str, default: int = 0) -> int:
    try:
        return int(row[name])
    except (KeyError, ValueError):
        return default


def _opt_int(row: Mapping[str, str], name: str) -> int | None:
    try:
        return int(float(row[name]))
    except (KeyError, ValueError):
        return None


def _split(value: str | None) -> tuple[str, ...]:
    return tuple(x for x in (value or "").split(",") if x)


@attrs.frozen(kw_only=True)
class WorkerRecord:
    """One worker as its last heartbeat left it. Times are server-clock milliseconds.

    ``alive``: its record exists (it beat within its TTL, a few heartbeats). A gone
    worker (``alive`` False) has only ``id`` and ``last_beat_ms``.
    ``unreachable_ms`` / ``unreachable_until_ms``: an outage its watchdog saw lately (Redis
    did not answer its heartbeats for that long, until then): not a block.
    """

    id: str
    alive: bool
    last_beat_ms: int
    started_at_ms: int | None = None
    host: str | None = None
    pid: int | None = None
    version: str | None = None
    queues: tuple[str, ...] = ()
    concurrency: int = 0
    lease_ms: int | None = None
    beat_ms: int | None = None
    held: int = 0
    running: tuple[str, ...] = ()
    counters: Mapping[str, int] = attrs.field(factory=dict)
    blocked_since_ms: int | None = None
    blocked_task: str | None = None
    blocked_job: str | None = None
    unreachable_ms: int | None = None
    unreachable_until_ms: int | None = None

    @property
    def blocked(self) -> bool:
        """Its event loop had not run for longer than its threshold at the last beat."""
        return self.blocked_since_ms is not None

    def silent_ms(self, now_ms: int) -> int:
        """Milliseconds since its last heartbeat."""
        return max(0, now_ms - self.last_beat_ms)

    @classmethod
    def from_record(cls, worker_id: str, last_beat_ms: int, flat: list[Any]) -> WorkerRecord:
        """A record from its flat HGETALL (empty: gone)."""
        if not flat:
            return cls(id=worker_id, alive=False, last_beat_ms=last_beat_ms)
        row = {text(k): text(x) for k, x in zip(flat[::2], flat[1::2], strict=True)}
        unreachable_ms, unreachable_until_ms = _outage(row)
        return cls(
            id=worker_id,
            alive=True,
            last_beat_ms=_opt_int(row, "last_beat") or last_beat_ms,
            started_at_ms=_opt_int(row, "started_at"),
            host=row.get("host"),
            pid=_opt_int(row, "pid"),
            version=row.get("version"),
            queues=_split(row.get("queues")),
            concurrency=_int(row, "concurrency"),
            lease_ms=_opt_int(row, "lease_ms"),
            beat_ms=_opt_int(row, "beat_ms"),
            held=_int(row, "held"),
            running=_split(row.get("running")),
            counters={name: _int(row, name) for name in COUNTERS},
            blocked_since_ms=_opt_int(row, "blocked_since"),
            blocked_task=row.get("blocked_task"),
            blocked_job=row.get("blocked_job"),
            unreachable_ms=unreachable_ms,
            unreachable_until_ms=unreachable_until_ms,
        )


def _outage(row: Mapping[str, str]) -> tuple[int | None, int | None]:
    """The record's last outage: how long, and until when on the server clock (its
    ``last_beat`` minus how long ago it ended)."""
    lasted, ago = _opt_int(row, "unreachable_ms"), _opt_int(row, "unreachable_ago_ms")
    last_beat = _opt_int(row, "last_beat")
    if lasted is None or last_beat is None:
        return None, None
    return lasted, last_beat - (ago or 0)


@attrs.frozen(kw_only=True)
class WorkerList:
    """What :func:`list_workers` answers: the records, newest beat first, and the server's
    clock when they were read."""

    now_ms: int
    workers: list[WorkerRecord]

    @property
    def alive(self) -> list[WorkerRecord]:
        return [w for w in self.workers if w.alive]


# -- builders (no I/O) -------------------------------------------------------------------------


def beat_call(
    queue: str,
    worker_id: str,
    beat: WorkerBeat,
    *,
    ttl_ms: int,
    up_ms: int,
    blocked_ms: int | None = None,
) -> ScriptCall[int]:
    """The ``heartbeat`` call: answer the server's now (ms)."""
    ks = Keyspace(queue)
    keys = [ks.workers, ks.worker(worker_id)]
    pairs = beat.fields()
    if len(pairs) // 2 > v.MAX_BEAT_FIELDS:
        raise InvalidArgument(f"a heartbeat has at most {v.MAX_BEAT_FIELDS} fields")
    argv = [
        worker_id,
        v.positive_int("ttl_ms", ttl_ms, v.MAX_MS),
        v.non_negative_int("up_ms", up_ms, v.MAX_MS),
        -1 if blocked_ms is None else v.non_negative_int("blocked_ms", blocked_ms, v.MAX_MS),
        *pairs,
    ]
    return script_call("heartbeat", keys, argv, _read_now)


def forget_call(queue: str, worker_id: str) -> ScriptCall[int]:
    """The ``heartbeat`` call of a worker that stops: its record and its entry go."""
    ks = Keyspace(queue)
    keys = [ks.workers, ks.worker(worker_id)]
    return script_call("heartbeat", keys, [worker_id, 0, 0, -1], _read_now)


def _read_now(reply: Any) -> int:
    if not isinstance(reply, int):
        raise ScriptError(f"heartbeat: unexpected reply {reply!r}")
    return reply


def list_workers_call(
    queue: str, *, limit: int = 100, keep_gone_ms: int = DEFAULT_KEEP_GONE_MS
) -> ScriptCall[WorkerList]:
    ks = Keyspace(queue)
    v.int_in("limit", limit, 1, v.MAX_BATCH)
    argv = [ks.base, limit, v.non_negative_int("keep_gone_ms", keep_gone_ms, v.MAX_MS)]

    def read(reply: Any) -> WorkerList:
        if not isinstance(reply, list) or not reply or (len(reply) - 1) % 3:
            raise ScriptError(f"list_workers: unexpected reply {reply!r}")
        workers = [
            WorkerRecord.from_record(text(reply[i]), int(float(reply[i + 1])), reply[i + 2])
            for i in range(1, len(reply), 3)
        ]
        return WorkerList(now_ms=int(reply[0]), workers=workers)

    return script_call("list_workers", [ks.workers], argv, read)


# -- verbs --------------------------------------------------------------------------------------


async def beat(
    conn: Executor,
    queue: str,
    worker_id: str,
    beat: WorkerBeat,
    *,
    ttl_ms: int,
    up_ms: int,
    blocked_ms: int | None = None,
) -> int:
    """Write this worker's record (TTL ``ttl_ms``) and its entry; answer the server's now.

    Raises:
        InvalidKey, InvalidArgument: before any I/O.
    """
    check_id(worker_id)
    return await evaluate(
        conn,
        beat_call(queue, worker_id, beat, ttl_ms=ttl_ms, up_ms=up_ms, blocked_ms=blocked_ms),
    )


async def forget(conn: Executor, queue: str, worker_id: str) -> None:
    """Remove this worker's record and entry (a clean stop)."""
    await evaluate(conn, forget_call(queue, worker_id))


async def list_workers(
    conn: Executor, queue: str, *, limit: int = 100, keep_gone_ms: int = DEFAULT_KEEP_GONE_MS
) -> WorkerList:
    """The queue's workers, newest heartbeat first (at most ``limit``, 1..100): live ones
    and those gone for less than ``keep_gone_ms`` (their record expired; ``alive`` False).
    Entries of workers gone longer are pruned.

    Raises:
        InvalidKey, InvalidArgument: before any I/O.
    """
    return await evaluate(conn, list_workers_call(queue, limit=limit, keep_gone_ms=keep_gone_ms))
