"""The JSON shapes the dashboard speaks over its websocket (DESIGN.md section 7).

Rule 1: every message is one JSON object with a ``type`` field; the server sends
``hello``, ``snapshot``, ``events``, ``auth`` and ``result``; the browser sends ``auth``,
``command``, ``logs``, ``history`` and ``flow``. docs/dashboard.md lists every field.
Rule 2: these are plain values (attrs, no I/O). Times are server-clock milliseconds.
Rule 3: what a browser sends is untrusted: :func:`parse_request` turns it into a typed
request or raises :class:`BadMessage`; nothing reaches a verb unchecked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

__all__ = [
    "ACTIONS",
    "JOB_ACTIONS",
    "ActiveJob",
    "AuthRequest",
    "BadMessage",
    "CommandRequest",
    "DeadJob",
    "EventItem",
    "FlowRequest",
    "GroupCount",
    "HistoryJob",
    "HistoryRequest",
    "LogsRequest",
    "QueueView",
    "RecentFailure",
    "RepeatItem",
    "Request",
    "WorkerInfo",
    "encode",
    "hello",
    "auth_reply",
    "result_reply",
    "events_message",
    "snapshot_message",
    "status_message",
    "parse_request",
]

#: Operator verbs a ``command`` may name; the job-scoped ones need a ``job`` id.
ACTIONS = frozenset({"pause", "resume", "drain", "reprocess", "remove", "cancel"})
JOB_ACTIONS = frozenset({"reprocess", "remove", "cancel"})
MAX_MESSAGE = 4096  # bytes a browser message may have; anything longer is refused
MAX_HISTORY_PAGE = 200  # archived jobs one history request may ask for
HISTORY_STATES = frozenset({"completed", "dead", "cancelled"})


class BadMessage(ValueError):
    """A browser message that is not JSON, or not one of the request shapes."""


@attrs.frozen(kw_only=True)
class ActiveJob:
    """A job some worker holds now."""

    id: str
    task: str
    call: str
    token: int  # the fencing token of the current claim
    progress: str | None
    lease_deadline_ms: int
    claimed_at_ms: int | None
    last_log: str | None


@attrs.frozen(kw_only=True)
class DeadJob:
    """A dead-lettered job, with its last error and its latest log lines."""

    id: str
    task: str
    call: str
    failures: int
    last_error: str | None
    finished_at_ms: int | None
    logs: list[str]


@attrs.frozen(kw_only=True)
class RecentFailure:
    """A failure this dashboard saw on the event channel (``retrying`` or ``dead``)."""

    job: str
    outcome: str
    error: str | None
    at_ms: int


@attrs.frozen(kw_only=True)
class GroupCount:
    """One group's lane (docs/lanes.md): its counts and what it does now (``standing``:
    ``turn`` it may start a job, ``limit`` at its concurrency limit, ``rate`` waiting for
    its rate window, ``idle`` nothing waits)."""

    name: str
    waiting: int
    active: int
    limit: int | None
    standing: str


@attrs.frozen(kw_only=True)
class RepeatItem:
    """A registered repeatable (docs/repeat.md) and its upcoming runs."""

    key: str
    task: str
    schedule: str  # in words: "every 5s", "cron */5 * * * * (Europe/Berlin)"
    paused: bool
    upcoming_ms: list[int]  # the next runs (none while paused)
    runs: int
    last_job: str | None
    missed: str  # the policy: once | skip


@attrs.frozen(kw_only=True)
class WorkerInfo:
    """A worker serving the queue, from its heartbeat record (docs/runtime.md, "Workers").

    ``status``: ``running``, ``blocked`` (its event loop has not run since
    ``blocked_since_ms``, in ``blocked_task``) or ``gone`` (no heartbeat lately).
    """

    id: str
    status: str
    host: str | None
    pid: int | None
    version: str | None
    concurrency: int
    held: int
    completed: int
    failed: int
    started_at_ms: int | None
    last_beat_ms: int
    blocked_since_ms: int | None
    blocked_task: str | None
    blocked_job: str | None


@attrs.frozen(kw_only=True)
class QueueView:
    """Everything the page shows for one queue.

    ``throughput``: jobs per second, one point per poll (a 5 s moving average of the
    totals); ``per_minute``: finished jobs in each of the last 60 minutes by outcome
    (``completed``, ``dead``, ``cancelled``; oldest first, the last one the current,
    partial minute), from the per-minute counters (``admin.stats``); ``capped``: rows and
    entries the retention's count guard deleted before their time, ever. ``groups``: the
    first groups by name (at most a page), ``group_total``: how many have waiting or
    active jobs.
    """

    name: str
    paused: bool
    counts: Mapping[str, int]
    totals: Mapping[str, int]
    throughput: Mapping[str, list[float]]
    active: list[ActiveJob]
    dead: list[DeadJob]
    failures: list[RecentFailure]
    per_minute: Mapping[str, list[int]] = attrs.field(factory=dict)
    capped: int = 0
    repeats: list[RepeatItem] = attrs.field(factory=list)
    workers: list[WorkerInfo] = attrs.field(factory=list)
    groups: list[GroupCount] = attrs.Factory(list)
    group_total: int = 0


@attrs.frozen(kw_only=True)
class HistoryJob:
    """One archived run of a job (the history panel), newest first; texts clipped."""

    id: str
    task: str | None
    state: str
    attempts: int
    failures: int | None
    created_at_ms: int | None
    claimed_at_ms: int | None
    finished_at_ms: int
    result: str | None
    error: str | None
    reason: str | None


@attrs.frozen(kw_only=True)
class EventItem:
    """One lifecycle event as published by a script, tagged with its queue."""

    queue: str
    event: Mapping[str, Any]


@attrs.frozen(kw_only=True)
class AuthRequest:
    token: str


@attrs.frozen(kw_only=True)
class CommandRequest:
    ref: int
    action: str
    queue: str
    job: str | None
    token: str


@attrs.frozen(kw_only=True)
class LogsRequest:
    ref: int
    queue: str
    job: str


@attrs.frozen(kw_only=True)
class HistoryRequest:
    """A page of the archive: newest first, after the cursor ``before`` (a page's ``next``)."""

    ref: int
    queue: str
    before: str | None = None
    state: str | None = None
    task: str | None = None
    limit: int = 25


@attrs.frozen(kw_only=True)
class FlowRequest:
    """A flow's tree (``job``: any job of it, shown from that job down), or, without a
    job, only the queue's waiting parents (docs/flows.md)."""

    ref: int
    queue: str
    job: str | None = None


Request = AuthRequest | CommandRequest | LogsRequest | HistoryRequest | FlowRequest


def encode(message: Mapping[str, Any]) -> str:
    """Compact JSON text for the websocket."""
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False)


def _plain(value: Any) -> Any:
    return attrs.asdict(value) if attrs.has(type(value)) else value


def hello(
    *,
    version: str,
    queues: list[str],
    interval: float,
    history: int,
    archive: str | None = None,
) -> dict[str, Any]:
    """The first message on every connection; ``archive``: the archive the history panel
    reads (its URL without a password), or None (no panel)."""
    return {
        "type": "hello",
        "version": version,
        "queues": queues,
        "interval": interval,
        "history": history,
        "archive": archive,
    }


def snapshot_message(*, now_ms: int, interval: float, queues: list[QueueView]) -> dict[str, Any]:
    """The whole picture: sent on connect and after every poll."""
    return {
        "type": "snapshot",
        "now_ms": now_ms,
        "interval": interval,
        "queues": [_plain(q) for q in queues],
    }


def events_message(items: list[EventItem], dropped: int = 0) -> dict[str, Any]:
    """A batch of live events (at most a few per second per client), oldest first."""
    return {"type": "events", "items": [_plain(i) for i in items], "dropped": dropped}


def status_message(*, ok: bool, error: str | None = None) -> dict[str, Any]:
    """Whether the dashboard can read Redis right now (sent when that changes)."""
    return {"type": "status", "ok": ok, "error": error}


def auth_reply(ok: bool) -> dict[str, Any]:
    return {"type": "auth", "ok": ok}


def result_reply(
    ref: int, *, ok: bool, value: Any = None, error: str | None = None, kind: str | None = None
) -> dict[str, Any]:
    """The answer to a ``command`` or ``logs`` request, matched by ``ref``."""
    return {"type": "result", "ref": ref, "ok": ok, "value": value, "error": error, "kind": kind}


def _field(data: Mapping[str, Any], name: str, kind: type, *, optional: bool = False) -> Any:
    value = data.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise BadMessage(f"field {name!r} must be {kind.__name__}")
    return value


def parse_request(text: str | bytes) -> Request:
    """Decode one browser message into a request, or raise :class:`BadMessage`."""
    if len(text) > MAX_MESSAGE:
        raise BadMessage("message too long")
    try:
        data = json.loads(text)
    except ValueError:
        raise BadMessage("not JSON") from None
    if not isinstance(data, dict):
        raise BadMessage("not a JSON object")
    kind = data.get("type")
    if kind == "auth":
        return AuthRequest(token=_field(data, "token", str))
    if kind == "logs":
        return LogsRequest(
            ref=_field(data, "ref", int),
            queue=_field(data, "queue", str),
            job=_field(data, "job", str),
        )
    if kind == "flow":
        return FlowRequest(
            ref=_field(data, "ref", int),
            queue=_field(data, "queue", str),
            job=_field(data, "job", str, optional=True) or None,
        )
    if kind == "history":
        limit = _field(data, "limit", int, optional=True)
        limit = 25 if limit is None else limit
        if not 1 <= limit <= MAX_HISTORY_PAGE:
            raise BadMessage(f"limit must be 1..{MAX_HISTORY_PAGE}")
        state = _field(data, "state", str, optional=True) or None
        if state is not None and state not in HISTORY_STATES:
            raise BadMessage(f"unknown state {state!r}")
        return HistoryRequest(
            ref=_field(data, "ref", int),
            queue=_field(data, "queue", str),
            before=_field(data, "before", str, optional=True) or None,
            state=state,
            task=_field(data, "task", str, optional=True) or None,
            limit=limit,
        )
    if kind == "command":
        action = _field(data, "action", str)
        if action not in ACTIONS:
            raise BadMessage(f"unknown action {action!r}")
        job = _field(data, "job", str, optional=True)
        if action in JOB_ACTIONS and job is None:
            raise BadMessage(f"{action} needs a job id")
        return CommandRequest(
            ref=_field(data, "ref", int),
            action=action,
            queue=_field(data, "queue", str),
            job=job,
            token=_field(data, "token", str, optional=True) or "",
        )
    raise BadMessage(f"unknown message type {kind!r}")
