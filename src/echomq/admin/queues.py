"""The queue-scope operator verbs (docs/operations.md): pause, resume, is_paused, drain, obliterate,
stats. ``echomq.admin`` is their public face.

- ``pause`` / ``resume``: the gate is the ``paused`` field of ``emq:{q}:meta``; the claim
  script reads it, so the verb ``jobs.claim`` and every worker stop claiming alike. Both are
  idempotent; the backlog is untouched. ``resume`` of a paused queue pushes a wake token so
  idle workers look; ``resume`` of a running queue writes nothing (docs/operations.md).
- ``drain``: the backlog (pending, and the schedule set when asked) is deleted with its rows
  and logs, a ``budget`` of jobs per script call (``drain_step``), so no call blocks Redis
  for long; active jobs and the repeat registry (``emq:{q}:repeat``, its records) are
  spared: a repeatable keeps producing after a drain (the operator-plane design).
- ``obliterate``: a paused queue is destroyed a ``budget`` of jobs at a time, down to its
  last ``emq:{q}:*`` key; ``obliterate_all`` loops until it is done.
- ``stats``: counts per state, the gate, repeatables, and throughput by the minute (from the
  per-minute counters ``metrics:<outcome>:<minute>`` the finishing scripts write), in one
  atomic read.
- ``set_retention`` / ``retention``: the queue's retention settings in its meta hash
  (docs/results.md): how long finished rows and completions entries are kept, and the
  count caps that guard memory.
- ``sweep_retention``: one call of the retention sweep (``retention_sweep.lua``): the
  finished-state indexes and the completions stream lose what retention has ended, at most
  ``limit`` entries per call; every worker runs it at its recovery tick (docs/results.md,
  "Cleanup").
- ``ensure_schema``: the queue's data layout version, written if absent, refused if not
  this echomq's (every worker calls it at start).
- ``migrate`` / ``migrate_step``: a queue of an older layout rewritten to this echomq's,
  a SCAN page of its keys per script call (idempotent; the version is written last).
(The lanes' limits at run time are ``admin/limits.py``.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from .._model.retention import Retention
from .._scripts import validate as v
from .._scripts.calls import SCHEMA_VERSION, Executor, ScriptCall, evaluate, script_call
from .._scripts.keyspace import Keyspace, check_group
from .._scripts.replies import as_int, check_status, text
from ..errors import InvalidArgument, QueueNotFound, SchemaMismatch, ScriptError

__all__ = [
    "DEFAULT_BUDGET",
    "MAX_BUDGET",
    "MAX_STATS_MINUTES",
    "MAX_SWEEP",
    "THROUGHPUT_WINDOW_MS",
    "DrainStep",
    "ObliterateStep",
    "Capped",
    "QueueStats",
    "Retention",
    "RetentionSweep",
    "capped",
    "drain",
    "drain_call",
    "drain_step",
    "ensure_schema",
    "ensure_schema_call",
    "MigrateStep",
    "migrate",
    "migrate_call",
    "migrate_step",
    "is_paused",
    "obliterate",
    "obliterate_all",
    "obliterate_call",
    "obliterate_step",
    "pause",
    "pause_call",
    "resume",
    "resume_call",
    "retention",
    "set_retention",
    "set_retention_call",
    "stats",
    "stats_call",
    "sweep_retention",
    "sweep_retention_call",
]

MAX_BUDGET = v.MAX_BUDGET  # jobs per drain / obliterate script call (a ~10 ms bound)
DEFAULT_BUDGET = MAX_BUDGET  # the operator-plane design says 1000: docs/operations.md
THROUGHPUT_WINDOW_MS = 60_000
DEFAULT_STATS_MINUTES = 15
MAX_STATS_MINUTES = v.MAX_MINUTES  # = METRICS_KEEP_MINUTES: the counters live 12 h
MAX_SWEEP = v.MAX_SWEEP  # index and stream entries per retention sweep call


def _ok(what: str) -> Any:
    def read(reply: Any) -> None:
        check_status(reply, what)

    return read


@attrs.frozen(kw_only=True)
class Capped:
    """What the count caps (the memory guard, docs/results.md) removed before its time, ever:
    completed, cancelled and dead rows, completions stream entries. Non-zero: a cap was
    hit."""

    completed: int = 0
    dead: int = 0
    completions: int = 0
    cancelled: int = 0

    @property
    def total(self) -> int:
        return self.completed + self.dead + self.completions + self.cancelled


@attrs.frozen(kw_only=True)
class RetentionSweep:
    """What one retention sweep call did (docs/results.md, "Cleanup")."""

    removed: int  # index entries whose row had gone (or lives on in another state)
    deleted: int  # rows with no TTL (written by echomq 0.1) whose time was up
    trimmed: int  # completions stream entries older than completions_keep
    more: bool  # the call stopped at its limit: call again at once

    @property
    def work(self) -> int:
        return self.removed + self.trimmed


@attrs.frozen(kw_only=True)
class QueueStats:
    """One queue at one instant (server clock): counts per state, the gate, throughput.

    Throughput comes from the per-minute counters (``metrics:<outcome>:<minute>``), not
    from the retained rows: ``completed_per_minute`` (and ``dead_``, ``cancelled_``) hold
    the last ``minutes`` minutes, oldest first, the last one being the current minute
    (partial). The totals count since the metrics began. ``dead`` and ``completed`` count
    the jobs whose retention has not ended (the index members scored now or later): a job
    whose row Redis has deleted is not counted, whether or not the retention sweep has
    reached its index entry yet.
    """

    queue: str
    pending: int
    scheduled: int
    active: int
    dead: int
    completed: int
    paused: bool
    completed_total: int  # every completion since the metrics began (metrics:completed)
    dead_total: int  # every dead-lettering since the metrics began (metrics:dead)
    completed_last_minute: int  # completions in the last 60 s (two buckets, interpolated)
    now_ms: int
    cancelled_total: int = 0
    capped: Capped = Capped()
    completed_per_minute: tuple[int, ...] = ()
    dead_per_minute: tuple[int, ...] = ()
    cancelled_per_minute: tuple[int, ...] = ()
    repeats: int = 0  # repeatables registered (docs/repeat.md), paused ones included
    repeats_paused: int = 0
    grouped: int = 0  # of ``pending``: the jobs waiting in group lanes (docs/lanes.md)
    groups: int = 0  # groups with waiting or active jobs
    waiting: int = 0  # flow parents with open children (docs/flows.md)
    cancelled: int = 0  # cancelled rows kept by the retention (the state ``cancelled``)
    # every job dropped past its deadline since the metrics began (metrics:expired); its
    # rows are kept in the dead index, so ``dead`` counts them too (docs/runtime.md "Expiry")
    expired_total: int = 0

    @property
    def jobs(self) -> int:
        """Jobs held in the seven state sets (the lanes counted with pending)."""
        return (
            self.pending
            + self.scheduled
            + self.active
            + self.dead
            + self.completed
            + self.cancelled
            + self.waiting
        )

    @property
    def minutes(self) -> int:
        return len(self.completed_per_minute)

    def last_minute(self, outcome: str = "completed") -> int:
        """Jobs of ``outcome`` in the last 60 s (the current minute's count plus the
        unexpired share of the previous one)."""
        return _last_minute(list(getattr(self, f"{outcome}_per_minute")), self.now_ms)

    def rate(self, outcome: str = "completed") -> float:
        """Jobs per minute of ``outcome`` (``completed`` | ``dead`` | ``cancelled``),
        averaged over the window's full minutes (the current one left out; 0 if none)."""
        series = getattr(self, f"{outcome}_per_minute")
        full = series[:-1]
        return sum(full) / len(full) if full else 0.0


def _last_minute(series: list[int], now_ms: int) -> int:
    """Completions in the last 60 s: the current minute's count plus the unexpired share of
    the previous minute's (the usual sliding-window estimate)."""
    if not series:
        return 0
    previous = series[-2] if len(series) > 1 else 0
    elapsed = (now_ms % 60_000) / 60_000
    return series[-1] + round(previous * (1 - elapsed))


@attrs.frozen(kw_only=True)
class DrainStep:
    """What one drain call did: the jobs it deleted, and those still waiting."""

    deleted: int
    remaining: int
    cursor: str = ""  # where the next step goes on in the group lanes ('' = the first)

    @property
    def done(self) -> bool:
        return self.remaining == 0


@attrs.frozen(kw_only=True)
class MigrateStep:
    """What one migrate call did: the rows it rewrote, whether the queue is done (its
    version written) and the SCAN cursor the next call goes on from."""

    done: bool
    rewritten: int
    cursor: str = "0"


@attrs.frozen(kw_only=True)
class ObliterateStep:
    """What one obliterate call did."""

    done: bool
    deleted: int


# -- builders (no I/O) ---------------------------------------------------------------------


def pause_call(queue: str) -> ScriptCall[None]:
    ks = Keyspace(queue)
    return script_call("pause", [ks.meta], [], _ok(f"pause {queue}"))


def resume_call(queue: str) -> ScriptCall[None]:
    ks = Keyspace(queue)
    return script_call("resume", [ks.meta, ks.wake], [], _ok(f"resume {queue}"))


def drain_call(
    queue: str, *, include_schedule: bool = False, budget: int = DEFAULT_BUDGET, cursor: str = ""
) -> ScriptCall[DrainStep]:
    ks = Keyspace(queue)
    if cursor != "":
        check_group(cursor)
    argv = [
        ks.base,
        "1" if include_schedule else "0",
        v.int_in("budget", budget, 1, MAX_BUDGET),
        cursor,
    ]

    def read(reply: Any) -> DrainStep:
        if not isinstance(reply, list) or len(reply) != 3:
            raise ScriptError(f"drain {queue}: unexpected reply {reply!r}")
        return DrainStep(
            deleted=as_int(reply[0]), remaining=as_int(reply[1]), cursor=text(reply[2])
        )

    return script_call("drain", [ks.pending, ks.schedule, ks.meta, ks.groups], argv, read)


def obliterate_call(
    queue: str,
    *,
    force: bool = False,
    budget: int = DEFAULT_BUDGET,
    leftovers: list[str] | None = None,
    finish: bool = False,
) -> ScriptCall[tuple[int, int]]:
    ks = Keyspace(queue)
    v.int_in("budget", budget, 1, MAX_BUDGET)
    keys = [
        ks.meta,
        ks.active,
        ks.pending,
        ks.schedule,
        ks.dead,
        ks.completed,
        ks.waiting,
        ks.wake,
        ks.metrics_completed,
        ks.metrics_dead,
        ks.sweep_guard,
    ]
    extra = list(leftovers or ())
    for key in extra:  # only this queue's keys, never the meta hash holding the gate
        if not key.startswith(ks.base) or key == ks.meta:
            raise InvalidArgument(f"not a leftover key of queue {queue!r}: {key!r}")
    argv = [ks.base, "1" if force else "0", budget, "1" if finish else "0"]

    def read(reply: Any) -> tuple[int, int]:
        if not isinstance(reply, list) or len(reply) != 2 or reply[0] not in (0, 1, 2):
            raise ScriptError(f"obliterate {queue}: unexpected reply {reply!r}")
        return reply[0], reply[1]

    return script_call("obliterate", keys + extra, argv, read)


def stats_call(queue: str, *, minutes: int = DEFAULT_STATS_MINUTES) -> ScriptCall[QueueStats]:
    ks = Keyspace(queue)
    keys = [
        ks.meta,
        ks.pending,
        ks.schedule,
        ks.active,
        ks.dead,
        ks.completed,
        ks.repeat,
        ks.groups,
        ks.waiting,
        ks.cancelled,
    ]
    v.int_in("minutes", minutes, 1, MAX_STATS_MINUTES)

    def read(reply: Any) -> QueueStats:
        if not isinstance(reply, list) or len(reply) != 21:
            raise ScriptError(f"stats {queue}: unexpected reply {reply!r}")
        n = [as_int(x) for x in reply[:10]]
        capped = [as_int(x) for x in reply[10]]
        series = [[as_int(x) for x in part] for part in reply[11:14]]
        lanes = as_int(reply[16])  # jobs waiting in group lanes (docs/lanes.md)
        return QueueStats(
            queue=queue,
            pending=n[0] + lanes,
            scheduled=n[1],
            active=n[2],
            dead=n[3],
            completed=n[4],
            paused=bool(n[5]),
            completed_total=n[6],
            dead_total=n[7],
            cancelled_total=n[8],
            now_ms=n[9],
            completed_last_minute=_last_minute(series[0], n[9]),
            capped=Capped(
                completed=capped[0], dead=capped[1], completions=capped[2], cancelled=capped[3]
            ),
            completed_per_minute=tuple(series[0]),
            dead_per_minute=tuple(series[1]),
            cancelled_per_minute=tuple(series[2]),
            repeats=as_int(reply[14]),
            repeats_paused=as_int(reply[15]),
            grouped=lanes,
            groups=as_int(reply[17]),
            waiting=as_int(reply[18]),
            cancelled=as_int(reply[19]),
            expired_total=as_int(reply[20]),
        )

    return script_call("queue_stats", keys, [ks.base, minutes], read)


def sweep_retention_call(queue: str, *, limit: int = MAX_SWEEP) -> ScriptCall[RetentionSweep]:
    """``retention_sweep.lua``: the meta and the completions stream; the base, the limit."""
    ks = Keyspace(queue)
    argv = [ks.base, v.positive_int("limit", limit, MAX_SWEEP)]

    def read(reply: Any) -> RetentionSweep:
        if not isinstance(reply, list) or len(reply) != 4:
            raise ScriptError(f"retention sweep {queue}: unexpected reply {reply!r}")
        n = [as_int(x) for x in reply]
        return RetentionSweep(removed=n[0], deleted=n[1], trimmed=n[2], more=bool(n[3]))

    return script_call("retention_sweep", [ks.meta, ks.completions], argv, read)


def set_retention_call(queue: str, **settings: Any) -> ScriptCall[None]:
    ks = Keyspace(queue)
    argv = Retention.meta_args(settings)
    return script_call("set_retention", [ks.meta], argv, _ok(f"set_retention {queue}"))


def ensure_schema_call(queue: str) -> ScriptCall[int]:
    def read(reply: Any) -> int:
        try:
            found = int(text(reply))
        except (ScriptError, ValueError):
            found = -1
        if found == SCHEMA_VERSION:
            return found
        if found > SCHEMA_VERSION:
            raise SchemaMismatch(
                f"queue {queue!r} has data layout version {found}, newer than this "
                f"echomq's {SCHEMA_VERSION}: upgrade echomq where this runs (a worker never "
                "runs jobs whose layout it does not know)",
                queue=queue,
                found=found,
            )
        shown = found if found >= 0 else repr(reply)
        raise SchemaMismatch(
            f"queue {queue!r} has data layout version {shown}, older than this echomq's "
            f"{SCHEMA_VERSION}: migrate it (`echomq migrate {queue}`, or admin.migrate; "
            "CHANGELOG.md lists what changed), then start this worker again",
            queue=queue,
            found=reply,
        )

    return script_call("ensure_schema", [Keyspace(queue).meta], [], read)


def migrate_call(
    queue: str, *, cursor: str = "0", budget: int = DEFAULT_BUDGET
) -> ScriptCall[MigrateStep]:
    ks = Keyspace(queue)
    if not (cursor.isascii() and cursor.isdigit()):
        raise InvalidArgument(f"cursor must be a SCAN cursor (decimal digits), not {cursor!r}")
    argv = [ks.base, cursor, v.int_in("budget", budget, 1, MAX_BUDGET)]

    def read(reply: Any) -> MigrateStep:
        if not isinstance(reply, list) or len(reply) != 3:
            raise ScriptError(f"migrate {queue}: unexpected reply {reply!r}")
        return MigrateStep(
            done=as_int(reply[0]) == 1, cursor=text(reply[1]), rewritten=as_int(reply[2])
        )

    return script_call("migrate", [ks.meta], argv, read)


# -- verbs ------------------------------------------------------------------------------------


async def pause(conn: Executor, queue: str) -> None:
    """Stop claiming on ``queue`` (verb claim and workers alike). Idempotent.

    Raises:
        QueueNotFound: the queue does not exist (no meta hash): a pause makes no queue.
    """
    await evaluate(conn, pause_call(queue))


async def resume(conn: Executor, queue: str) -> None:
    """Claim again on ``queue`` and wake idle workers. Idempotent.

    Raises:
        QueueNotFound: the queue does not exist (no meta hash); nothing was written.
    """
    await evaluate(conn, resume_call(queue))


async def is_paused(conn: Executor, queue: str) -> bool:
    """Whether the claim gate of ``queue`` is set."""
    return bool(await conn.execute("HEXISTS", Keyspace(queue).meta, "paused"))


async def drain_step(
    conn: Executor,
    queue: str,
    *,
    include_schedule: bool = False,
    budget: int = DEFAULT_BUDGET,
    cursor: str = "",
) -> DrainStep:
    """One bounded drain call: delete up to ``budget`` waiting jobs (pending first, then the
    group lanes from ``cursor`` on, then scheduled when asked) with their rows, logs and
    locks; answer what it did and the cursor for the next step.

    Raises:
        InvalidKey, InvalidArgument: before any I/O (``budget`` is 1..500).
        QueueNotFound: the queue does not exist (no meta hash); nothing was written.
    """
    return await evaluate(
        conn,
        drain_call(queue, include_schedule=include_schedule, budget=budget, cursor=cursor),
    )


async def drain(
    conn: Executor,
    queue: str,
    *,
    include_schedule: bool = False,
    budget: int = DEFAULT_BUDGET,
    on_progress: Callable[[int, int], object] | None = None,
) -> int:
    """Delete the backlog: every pending job, those in group lanes too (and scheduled, when
    asked) with its row and logs.

    Active jobs and recurring registrations are untouched. Answers the number deleted.
    Runs :func:`drain_step` until nothing waits, so no single call holds Redis for long;
    ``on_progress(deleted_so_far, remaining)`` runs after each step. Jobs enqueued while
    the drain runs may be drained too.

    Raises:
        InvalidKey, InvalidArgument: before any I/O (``budget`` is 1..500).
        QueueNotFound: the queue does not exist (no meta hash); nothing was written.
    """
    total = 0
    cursor = ""
    while True:
        step = await drain_step(
            conn, queue, include_schedule=include_schedule, budget=budget, cursor=cursor
        )
        cursor = step.cursor
        total += step.deleted
        if on_progress is not None:
            on_progress(total, step.remaining)
        if step.done:
            return total


async def _scan(conn: Executor, pattern: str, limit: int) -> tuple[list[str], bool]:
    """Up to ``limit`` keys matching ``pattern``; True when the iteration went all the way."""
    found: list[str] = []
    cursor: Any = b"0"
    while True:
        cursor, batch = await conn.execute("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)
        found += [k.decode() if isinstance(k, bytes) else k for k in batch]
        if cursor in (b"0", 0, "0"):
            return sorted(set(found)), True
        if len(found) >= limit:
            return sorted(set(found)), False


async def obliterate_step(
    conn: Executor, queue: str, *, force: bool = False, budget: int = DEFAULT_BUDGET
) -> ObliterateStep:
    """One bounded obliterate call; see :func:`obliterate`. Answers what it deleted."""
    ks = Keyspace(queue)
    status, deleted = await evaluate(conn, obliterate_call(queue, force=force, budget=budget))
    if status == 1:
        return ObliterateStep(done=False, deleted=deleted)
    # every set is empty: what remains are keys no set points to (orphan rows and logs,
    # other verbs' records); find them with SCAN, and keep the meta hash (the gate) for last
    remaining = budget - deleted
    if remaining <= 0:
        return ObliterateStep(done=False, deleted=deleted)
    keys, complete = await _scan(conn, ks.pattern, remaining)
    keys = [k for k in keys if k != ks.meta]
    finish = complete and len(keys) <= remaining
    sc = obliterate_call(
        queue, force=force, budget=remaining, leftovers=keys[:remaining], finish=finish
    )
    status, more = await evaluate(conn, sc)
    return ObliterateStep(done=status == 0, deleted=deleted + more)


async def obliterate(
    conn: Executor, queue: str, *, force: bool = False, budget: int = DEFAULT_BUDGET
) -> bool:
    """Destroy a paused queue, at most ``budget`` jobs per call.

    Answers False while work remains (call again) and True once no ``emq:{q}:*`` key
    remains (the meta hash, with the gate, goes last). Producers writing to the queue
    while it is obliterated may leave keys behind: stop them first.

    Raises:
        InvalidKey, InvalidArgument: before any I/O (``budget`` is 1..500).
        QueueNotFound: the queue does not exist (no meta hash); nothing was deleted.
        NotPaused: the queue is not paused; nothing was deleted.
        ActiveJobs: jobs are in flight and ``force`` is not set; nothing was deleted.
    """
    step = await obliterate_step(conn, queue, force=force, budget=budget)
    return step.done


async def obliterate_all(
    conn: Executor,
    queue: str,
    *,
    force: bool = False,
    budget: int = DEFAULT_BUDGET,
    on_progress: Callable[[int], object] | None = None,
) -> int:
    """Call :func:`obliterate` until the queue is gone; answer the number of keys/jobs deleted.

    ``on_progress(deleted_so_far)`` runs after every call. Refusals as :func:`obliterate`;
    a refusal on a later call (someone resumed the queue) stops the loop with that error.
    """
    total = 0
    while True:
        step = await obliterate_step(conn, queue, force=force, budget=budget)
        total += step.deleted
        if on_progress is not None:
            on_progress(total)
        if step.done:
            return total


async def stats(conn: Executor, queue: str, *, minutes: int = DEFAULT_STATS_MINUTES) -> QueueStats:
    """Counts per state, the gate and throughput of ``queue``, in one atomic read:
    completed / dead / cancelled jobs in each of the last ``minutes`` (1..720) minutes.

    Raises:
        InvalidKey, InvalidArgument: before any I/O.
    """
    return await evaluate(conn, stats_call(queue, minutes=minutes))


async def sweep_retention(conn: Executor, queue: str, *, limit: int = MAX_SWEEP) -> RetentionSweep:
    """One call of the retention sweep (server clock): index entries of jobs whose
    retention ended leave the ``completed`` / ``dead`` indexes, and completions entries
    older than ``completions_keep`` leave the stream, at most ``limit`` (1..``MAX_SWEEP``)
    entries in all. A live row is never touched. ``more``: call again. Workers run it at
    every recovery tick; an operator needs it only for a queue no worker serves.

    Raises:
        InvalidKey, InvalidArgument: before any I/O.
    """
    return await evaluate(conn, sweep_retention_call(queue, limit=limit))


async def capped(conn: Executor, queue: str) -> Capped:
    """What the count guard removed before its time, ever (one HMGET; ``stats`` has it too).

    Raises:
        InvalidKey: before any I/O.
    """
    raw = await conn.execute(
        "HMGET", Keyspace(queue).metrics_capped, "completed", "dead", "completions", "cancelled"
    )
    n = [int(x) if x is not None else 0 for x in raw]
    return Capped(completed=n[0], dead=n[1], completions=n[2], cancelled=n[3])


async def set_retention(conn: Executor, queue: str, **settings: Any) -> None:
    """Set the queue's retention settings (docs/results.md); ``None`` resets one to its
    default. Times in seconds: ``keep_result``, ``keep_dead``, ``completions_keep``;
    counts: ``completions_max``, ``max_completed``, ``max_dead``, ``max_log_lines``;
    ``keep_payload`` (a bool: whether a completed or cancelled row keeps its payload).
    What finishes from now on follows them; rows already finished keep their TTL.

    Raises:
        InvalidKey, InvalidArgument: an unknown setting or a bad value, before any I/O.
        QueueNotFound: the queue does not exist (no meta hash); nothing was written.
    """
    await evaluate(conn, set_retention_call(queue, **settings))


async def retention(conn: Executor, queue: str) -> Retention:
    """The queue's retention settings, defaults filled in (``explicit``: those it sets).

    Raises:
        InvalidKey: before any I/O.
    """
    names = Retention.names()
    raw = await conn.execute("HMGET", Keyspace(queue).meta, *names)
    values: dict[str, int | None] = {}
    for name, value in zip(names, raw, strict=True):
        try:
            values[name] = int(value) if value is not None else None
        except ValueError:
            values[name] = None  # not a number: the scripts read it as unset too
    return Retention.from_meta(values)


async def migrate_step(
    conn: Executor, queue: str, *, cursor: str = "0", budget: int = DEFAULT_BUDGET
) -> MigrateStep:
    """One bounded migrate call: rewrite the rows of one SCAN page (``budget`` keys) of
    ``queue`` to this echomq's layout; the last page also renames the counters and writes
    the version.

    Raises:
        InvalidKey, InvalidArgument: before any I/O.
        SchemaMismatch: the queue's layout is newer than this echomq's.
    """
    return await evaluate(conn, migrate_call(queue, cursor=cursor, budget=budget))


async def migrate(conn: Executor, queue: str, *, budget: int = DEFAULT_BUDGET) -> int:
    """Rewrite ``queue`` to this echomq's data layout (``schema_version``), a page at a
    time so that no call holds Redis for long; answer the rows rewritten. Idempotent: a
    queue already of this layout answers 0 and nothing is written; an interrupted
    migration is run again from the start. Stop the queue's workers of the old layout
    first: workers of this echomq refuse the queue until it is done (CHANGELOG.md lists
    what each layout changed).

    Raises:
        InvalidKey, InvalidArgument: before any I/O.
        QueueNotFound: there is no such queue (nothing written).
        SchemaMismatch: the queue's layout is newer than this echomq's.
    """
    meta = Keyspace(queue).meta
    if not await conn.execute("EXISTS", meta):
        raise QueueNotFound(queue)
    rewritten, cursor = 0, "0"
    while True:
        step = await migrate_step(conn, queue, cursor=cursor, budget=budget)
        rewritten += step.rewritten
        if step.done:
            return rewritten
        cursor = step.cursor


async def ensure_schema(conn: Executor, queue: str) -> int:
    """Make sure ``queue`` is laid out as this echomq lays it out; answer the version.

    A new queue (no ``schema_version`` and no jobs written: no ``seq``) is marked with
    this echomq's; a queue from before versions (``seq`` but no version) answers 0 and is
    refused (``migrate`` it). Every worker calls this at start.

    Raises:
        InvalidKey: before any I/O.
        SchemaMismatch: the queue's version is another; nothing was written.
    """
    return await evaluate(conn, ensure_schema_call(queue))
