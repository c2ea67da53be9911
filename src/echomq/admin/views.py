"""Read-only views of a queue's jobs for people: what runs now, what died, which ids a
state holds.

Rule 1: nothing here writes. A view is one range read of a state set and one pipelined
read of the rows it names (the rows and logs share the queue's slot, so on a cluster the
pipeline goes to one master); keys come from the key builder only.
Rule 2: a view is not a snapshot: a job that settles between the two reads still shows,
with what its row says now (``None`` for fields of a row that is gone).
Rule 3: the answers are typed rows (:class:`ActiveRow`, :class:`DeadRow`, :class:`JobRow`):
the payload as stored bytes, numbers, and the row's texts (progress, errors, log lines)
decoded without ever failing (bytes that are not UTF-8 show escaped); the CLI and the
dashboard format them.
"""

from __future__ import annotations

from typing import Any

import attrs

from .._model.caps import positive_int
from .._model.text import raw_text
from .._scripts.keyspace import Keyspace, check_group
from .._wire.interface import RedisConnection
from ..errors import InvalidArgument, ServerError
from .limits import RateLimit, own_rate, rate_of

__all__ = [
    "JOB_STATES",
    "MAX_SCAN",
    "MAX_VIEW",
    "ActiveRow",
    "DeadRow",
    "GroupRow",
    "JobPage",
    "JobRow",
    "active_jobs",
    "dead_jobs",
    "group",
    "groups",
    "list_jobs",
    "server_now_ms",
]

MAX_VIEW = 1000  # rows (and log lines per row) one view call reads
MAX_SCAN = 10_000  # ids ``list_jobs`` looks at, at most, for a page filtered by task
#: the states ``list_jobs`` lists, each held by one sorted set of the queue
JOB_STATES = ("pending", "waiting", "scheduled", "active", "dead", "completed", "cancelled")


@attrs.frozen(kw_only=True)
class ActiveRow:
    """A job some worker holds now. Times are server-clock milliseconds."""

    id: str
    payload: bytes | None
    token: int  # the fencing token of the current claim (the row's ``token``)
    progress: str | None
    lease_deadline_ms: int
    claimed_at_ms: int | None
    last_log: str | None


@attrs.frozen(kw_only=True)
class DeadRow:
    """A dead-lettered job, with its last error and its latest log lines."""

    id: str
    payload: bytes | None
    failures: int
    last_error: str | None
    died_at_ms: int  # the row's finished_at (the dead set's score is when its retention ends)
    logs: list[str]
    expires_at_ms: int | None = None  # when the dead retention deletes the row


@attrs.frozen(kw_only=True)
class JobRow:
    """One id of a state set (:func:`list_jobs`), with the few fields people list.

    ``score`` is the id's score in its set (pending: the claim order; scheduled: when it
    is due; active: its lease deadline; dead, completed: when the row's retention ends;
    waiting: when it began to wait). The other fields are the row's, ``None`` when absent
    (a row that left between the two reads has them all ``None``).
    """

    id: str
    state: str  # the state asked for (the set that held the id)
    score: int
    task: str | None
    created_at_ms: int | None
    claimed_at_ms: int | None
    finished_at_ms: int | None
    failures: int | None
    last_error: str | None
    # a member of the dead set whose row is ``expired``: its deadline passed before it
    # started (docs/runtime.md "Expiry"), kept as a dead row is
    expired: bool = False

    @property
    def when_ms(self) -> int | None:
        """The time that tells this state: created (pending), due (scheduled), claimed
        (active), finished (dead, completed, cancelled), began to wait (waiting)."""
        if self.state == "scheduled" or self.state == "waiting":
            return self.score
        if self.state == "active":
            return self.claimed_at_ms
        if self.state in ("dead", "completed", "cancelled"):
            return self.finished_at_ms
        return self.created_at_ms


@attrs.frozen(kw_only=True)
class JobPage:
    """What :func:`list_jobs` found: the rows, newest first (or oldest, as asked); ``total``
    ids in the set; ``examined`` of them read; ``complete`` when the read reached the end
    of the set (False: a task filter stopped at ``MAX_SCAN`` ids, or the page is full)."""

    rows: list[JobRow]
    total: int
    examined: int
    complete: bool


@attrs.frozen(kw_only=True)
class GroupRow:
    """A group's lane and standing (docs/lanes.md). ``limit`` and ``rate`` are what apply
    (the group's own, else the queue's defaults); ``own_limit`` / ``own_rate``: its own."""

    name: str
    waiting: int  # jobs in its lane
    active: int  # its jobs held now
    limit: int | None  # concurrency (None: no limit)
    own_limit: bool
    rate: RateLimit | None
    own_rate: bool
    in_ring: bool  # it has a turn in the claim's round robin
    limited_until_ms: int | None  # waiting for its rate window (server clock)

    @property
    def at_limit(self) -> bool:
        return self.limit is not None and self.active >= self.limit


def _text(value: Any) -> str | None:
    """Stored bytes as text, never failing: bytes that are not UTF-8 show escaped (``\\xff``)."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return raw_text(value)
    return str(value)


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _members(flat: list[Any]) -> list[tuple[str, int]]:
    return [(_text(flat[i]) or "", int(float(flat[i + 1]))) for i in range(0, len(flat), 2)]


async def _read_many(conn: RedisConnection, commands: list[tuple[Any, ...]]) -> list[Any]:
    """Read-only commands in one write; an error reply raises."""
    if not commands:
        return []
    replies = await conn.execute_pipeline(commands)
    for reply in replies:
        if isinstance(reply, ServerError):
            raise reply
    return replies


async def active_jobs(conn: RedisConnection, queue: str, *, limit: int = 50) -> list[ActiveRow]:
    """The jobs held now, soonest lease deadline first; at most ``limit`` (1..1000).

    Raises:
        InvalidKey, InvalidArgument: before any I/O.
    """
    ks = Keyspace(queue)
    positive_int("limit", limit, MAX_VIEW)
    members = _members(await conn.execute("ZRANGE", ks.active, 0, limit - 1, "WITHSCORES"))
    fields = ("payload", "token", "progress", "claimed_at")
    replies = await _read_many(
        conn,
        [("HMGET", ks.job(j), *fields) for j, _ in members]
        + [("LINDEX", ks.logs(j), -1) for j, _ in members],
    )
    rows = []
    for i, (job_id, deadline) in enumerate(members):
        payload, token, progress, claimed_at = replies[i]
        rows.append(
            ActiveRow(
                id=job_id,
                payload=payload,
                token=_int(token) or 0,
                progress=_text(progress),
                lease_deadline_ms=deadline,
                claimed_at_ms=_int(claimed_at),
                last_log=_text(replies[len(members) + i]),
            )
        )
    return rows


async def dead_jobs(
    conn: RedisConnection, queue: str, *, limit: int = 20, log_lines: int = 10
) -> list[DeadRow]:
    """The dead-lettered jobs, latest first (by when their retention ends: the latest to
    die, unless retentions differ), each with its last ``log_lines`` log lines; at most
    ``limit`` (1..1000) jobs.

    Raises:
        InvalidKey, InvalidArgument: before any I/O.
    """
    ks = Keyspace(queue)
    positive_int("limit", limit, MAX_VIEW)
    positive_int("log_lines", log_lines, MAX_VIEW)
    members = _members(await conn.execute("ZREVRANGE", ks.dead, 0, limit - 1, "WITHSCORES"))
    fields = ("payload", "failures", "last_error", "finished_at")
    replies = await _read_many(
        conn,
        [("HMGET", ks.job(j), *fields) for j, _ in members]
        + [("LRANGE", ks.logs(j), -log_lines, -1) for j, _ in members],
    )
    rows = []
    for i, (job_id, ends_at) in enumerate(members):
        payload, failures, last_error, finished_at = replies[i]
        rows.append(
            DeadRow(
                id=job_id,
                payload=payload,
                failures=_int(failures) or 0,
                last_error=_text(last_error),
                died_at_ms=_int(finished_at) or 0,
                logs=[_text(line) or "" for line in replies[len(members) + i]],
                expires_at_ms=ends_at,
            )
        )
    return rows


_ROW_FIELDS = (
    "task", "created_at", "claimed_at", "finished_at", "failures", "last_error", "state",
)  # fmt: skip


def _state_key(ks: Keyspace, state: str, group: str | None) -> str:
    if state not in JOB_STATES:
        raise InvalidArgument(f"state must be one of {', '.join(JOB_STATES)}, not {state!r}")
    if group is not None:
        if state != "pending":
            raise InvalidArgument("group names a lane of pending jobs: give state='pending'")
        return ks.lane(group)
    key: str = getattr(ks, "schedule" if state == "scheduled" else state)
    return key


async def list_jobs(
    conn: RedisConnection,
    queue: str,
    state: str,
    *,
    task: str | None = None,
    group: str | None = None,
    limit: int = 50,
    oldest: bool = False,
) -> JobPage:
    """The ids ``state`` holds, newest first (by their score in the state's set: the end of
    the claim order, the latest due, the latest lease deadline, the latest retention end),
    or with ``oldest`` from the other end (pending: the next to be claimed); at most
    ``limit`` (1..1000).

    ``state`` is one of :data:`JOB_STATES`; ``group`` lists one group's lane (pending jobs
    of a group wait there, not in ``pending``: docs/lanes.md). ``task`` keeps the rows
    whose ``task`` field is that name. It is filtered here, not on the server: each round
    reads a window of ids (one ``ZRANGE`` with the ``ZCARD``) and then their rows (one
    pipelined ``HMGET`` per id, one round trip), so a page costs two round trips per
    window of up to 1000 ids, and a filtered page looks at :data:`MAX_SCAN` ids at most
    (``JobPage.complete`` False when it stopped there). A job enqueued without a task name
    (a raw verb's) has no ``task`` and never matches one.

    Raises:
        InvalidKey, InvalidArgument: before any I/O.
    """
    ks = Keyspace(queue)
    key = _state_key(ks, state, group)
    positive_int("limit", limit, MAX_VIEW)
    if task is not None and (not isinstance(task, str) or not task):
        raise InvalidArgument("task must be a non-empty str")
    window = limit if task is None else MAX_VIEW
    order = "ZRANGE" if oldest else "ZREVRANGE"
    rows: list[JobRow] = []
    examined = total = 0
    while True:
        card, flat = await _read_many(
            conn,
            [("ZCARD", key), (order, key, examined, examined + window - 1, "WITHSCORES")],
        )
        total = int(card)
        members = _members(flat)
        replies = await _read_many(conn, [("HMGET", ks.job(j), *_ROW_FIELDS) for j, _ in members])
        examined += len(members)
        for (job_id, score), fields in zip(members, replies, strict=True):
            name, created, claimed, finished, failures, error, row_state = fields
            if task is not None and _text(name) != task:
                continue
            rows.append(
                JobRow(
                    id=job_id,
                    state=state,
                    score=score,
                    task=_text(name),
                    created_at_ms=_int(created),
                    claimed_at_ms=_int(claimed),
                    finished_at_ms=_int(finished),
                    failures=_int(failures),
                    last_error=_text(error),
                    expired=_text(row_state) == "expired",
                )
            )
            if len(rows) == limit:
                return JobPage(rows=rows, total=total, examined=examined, complete=False)
        if len(members) < window:
            return JobPage(rows=rows, total=total, examined=examined, complete=True)
        if task is None or examined >= MAX_SCAN:
            return JobPage(rows=rows, total=total, examined=examined, complete=False)


async def _group_rows(conn: RedisConnection, queue: str, names: list[str]) -> list[GroupRow]:
    ks = Keyspace(queue)
    if not names:
        return []
    per = 3
    own_fields = [f for name in names for f in (name, name + ":limit", name + ":rate")]
    commands: list[tuple[Any, ...]] = [
        (
            "HMGET",
            ks.meta,
            "group_concurrency",
            "group_rate_max",
            "group_rate_ms",
            "group_rate_kind",
        ),
        ("HMGET", ks.gstate, *own_fields),
    ]
    for name in names:
        commands += [
            ("ZCARD", ks.lane(name)),
            ("ZSCORE", ks.ring, name),
            ("ZSCORE", ks.limited, name),
        ]
    replies = await _read_many(conn, commands)
    default_limit, default_max, default_ms, default_kind = replies[0]
    own = replies[1]
    rows = []
    for i, name in enumerate(names):
        waiting, ring_score, until = replies[2 + i * per : 2 + (i + 1) * per]
        held, limit, own_value = own[3 * i : 3 * i + 3]
        rate: RateLimit | None = None
        if own_value is not None:
            rate = own_rate(own_value)
        else:
            rate = rate_of(default_max, default_ms, default_kind)
        rows.append(
            GroupRow(
                name=name,
                waiting=int(waiting),
                active=_int(held) or 0,
                limit=_int(limit if limit is not None else default_limit),
                own_limit=limit is not None,
                rate=rate,
                own_rate=own_value is not None,
                in_ring=ring_score is not None,
                limited_until_ms=None if until is None else int(float(until)),
            )
        )
    return rows


async def groups(
    conn: RedisConnection, queue: str, *, after: str = "", limit: int = 50
) -> list[GroupRow]:
    """The groups with waiting or active jobs, by name after ``after``; at most ``limit``
    (1..1000). Page with ``after=rows[-1].name``.

    Raises:
        InvalidKey, InvalidArgument: before any I/O.
    """
    ks = Keyspace(queue)
    positive_int("limit", limit, MAX_VIEW)
    start = "(" + check_group(after) if after else "-"
    found = await conn.execute("ZRANGEBYLEX", ks.groups, start, "+", "LIMIT", 0, limit)
    return await _group_rows(conn, queue, [_text(name) or "" for name in found])


async def group(conn: RedisConnection, queue: str, name: str) -> GroupRow:
    """One group's lane and standing (a group with no work shows zeros and its settings).

    Raises:
        InvalidKey: before any I/O.
    """
    check_group(name)
    return (await _group_rows(conn, queue, [name]))[0]


async def server_now_ms(conn: RedisConnection) -> int:
    """The server's clock in milliseconds (the clock every lease and score is on)."""
    seconds, micros = await conn.execute("TIME")
    return int(seconds) * 1000 + int(micros) // 1000
