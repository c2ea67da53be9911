"""The JSON shapes the dashboard speaks over its websocket (DESIGN.md section 7).

Rule 1: every message is one JSON object with a ``type`` field; the server sends
``hello``, ``snapshot``, ``events``, ``auth`` and ``result``; the browser sends ``auth``,
``command``, ``logs``, ``history`` and ``flow``. docs/dashboard.md lists every field.
Rule 2: these are plain values (attrs, no I/O). Times are server-clock milliseconds.
Rule 3: what a browser sends is untrusted: :func:`parse_request` turns it into a typed
request or raises :class:`BadMessage`, whose ``reason`` names the rule broken
(``REFUSALS``); nothing reaches a verb unchecked. The size (``MAX_MESSAGE`` bytes) and the
nesting depth (``MAX_DEPTH``, counted by a scan, not by recursion) are checked before the
text is parsed, so no message can exhaust the parser; a string that is not Unicode text
(a lone surrogate, ``"\\ud800"``) is refused too, since it could not be sent back.
Rule 4: :func:`encode` answers text any websocket can carry: a value holding a lone
surrogate (a job payload can) is written with ASCII escapes instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import attrs

from .._model.codec import json_depth

__all__ = [
    "ACTIONS",
    "JOB_ACTIONS",
    "MAX_DEPTH",
    "MAX_MESSAGE",
    "REFUSALS",
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
    "refusal",
]

#: Operator verbs a ``command`` may name; the job-scoped ones need a ``job`` id.
ACTIONS = frozenset({"pause", "resume", "drain", "reprocess", "remove", "cancel"})
JOB_ACTIONS = frozenset({"reprocess", "remove", "cancel"})
MAX_MESSAGE = 4096  # bytes (UTF-8) a browser message may have; anything longer is refused
MAX_DEPTH = 8  # arrays and objects nested in a browser message, at most (the shapes use 1)
MAX_REF = 2**53 - 1  # the largest integer a browser's JSON keeps exactly
#: BadMessage.reason -> what was wrong
REFUSALS = {
    "too_large": f"longer than {MAX_MESSAGE} bytes",
    "too_deep": f"arrays or objects nested deeper than {MAX_DEPTH}",
    "not_utf8": "a binary message that is not UTF-8, or a string with a lone surrogate",
    "not_json": "not JSON",
    "not_object": "JSON, but not an object",
    "unknown_type": "no known type",
    "unknown_action": "a command with no known action",
    "bad_field": "a field missing, of the wrong type or out of range",
}
MAX_HISTORY_PAGE = 200  # archived jobs one history request may ask for
HISTORY_STATES = frozenset({"completed", "dead", "cancelled", "expired"})


class BadMessage(ValueError):
    """A browser message that is not one of the request shapes. ``reason``: a key of
    ``REFUSALS``; ``ref``: the message's ``ref`` when it had a valid one, else -1."""

    def __init__(self, reason: str, message: str, ref: int = -1) -> None:
        assert reason in REFUSALS, reason
        super().__init__(message)
        self.reason = reason
        self.ref = ref


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
    ``unreachable_ms`` / ``unreachable_until_ms``: an outage of Redis it saw lately (not a
    block).
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
    unreachable_ms: int | None = None
    unreachable_until_ms: int | None = None


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
    token: int
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
    """Compact JSON text for the websocket (rule 4)."""
    text = json.dumps(message, separators=(",", ":"), ensure_ascii=False)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: JSON's \\uXXXX escapes carry it
            return json.dumps(message, separators=(",", ":"))
    return text


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


def refusal(error: BadMessage) -> dict[str, Any]:
    """The answer to a message :func:`parse_request` refused: a ``result`` of kind
    ``bad_message`` with the ``reason`` (a key of ``REFUSALS``); ``ref`` -1 unless the
    message had a valid one."""
    reply = result_reply(error.ref, ok=False, error=str(error), kind="bad_message")
    reply["reason"] = error.reason
    return reply


_SURROGATE = re.compile("[\ud800-\udfff]")


def nesting_depth(text: str, limit: int = MAX_DEPTH) -> int:
    """How deep arrays and objects nest in ``text`` (``codec.json_depth``: a scan, never
    recursion, stopping once ``limit`` is passed)."""
    return json_depth(text, limit)


def _text_of(message: str | bytes) -> str:
    """The message as text, within the size and depth limits (before any parsing)."""
    size = len(message)
    if isinstance(message, str) and size <= MAX_MESSAGE and not message.isascii():
        size = len(message.encode("utf-8", "surrogatepass"))
    if size > MAX_MESSAGE:
        raise BadMessage("too_large", f"message too long (at most {MAX_MESSAGE} bytes)")
    if isinstance(message, bytes):
        try:
            message = message.decode("utf-8")
        except UnicodeDecodeError:
            raise BadMessage("not_utf8", "a binary message must be UTF-8 JSON") from None
    if nesting_depth(message) > MAX_DEPTH:
        raise BadMessage("too_deep", f"nested deeper than {MAX_DEPTH} levels")
    return message


def _check_strings(value: Any) -> None:
    """Every string (key or value) in the parsed message is Unicode text (no lone
    surrogate, which ``\\ud800`` spells): walked with a list, not by recursion."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                raise BadMessage("not_utf8", "a string holds a lone surrogate")
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _field(data: Mapping[str, Any], name: str, kind: type, *, optional: bool = False) -> Any:
    value = data.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise BadMessage("bad_field", f"field {name!r} must be {kind.__name__}")
    return value


def _ref(data: Mapping[str, Any]) -> int:
    ref = _field(data, "ref", int)
    if not 0 <= ref <= MAX_REF:
        raise BadMessage("bad_field", "field 'ref' must be an int in 0..2**53-1")
    return int(ref)


def parse_request(message: str | bytes) -> Request:
    """Decode one browser message (a text frame, or a binary one holding UTF-8) into a
    request, or raise :class:`BadMessage` (rule 3)."""
    text = _text_of(message)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: never, the depth is checked first
        raise BadMessage("not_json", "not JSON") from None
    if not isinstance(data, dict):
        raise BadMessage("not_object", "not a JSON object")
    ref = data.get("ref")
    try:
        _check_strings(data)
        return _request(data)
    except BadMessage as exc:
        if isinstance(ref, int) and not isinstance(ref, bool) and 0 <= ref <= MAX_REF:
            exc.ref = ref
        raise


def _request(data: dict[str, Any]) -> Request:
    kind = data.get("type")
    if kind == "auth":
        return AuthRequest(token=_field(data, "token", str))
    if kind == "logs":
        return LogsRequest(
            ref=_ref(data),
            queue=_field(data, "queue", str),
            job=_field(data, "job", str),
        )
    if kind == "flow":
        return FlowRequest(
            ref=_ref(data),
            queue=_field(data, "queue", str),
            job=_field(data, "job", str, optional=True) or None,
        )
    if kind == "history":
        limit = _field(data, "limit", int, optional=True)
        limit = 25 if limit is None else limit
        if not 1 <= limit <= MAX_HISTORY_PAGE:
            raise BadMessage("bad_field", f"limit must be 1..{MAX_HISTORY_PAGE}")
        state = _field(data, "state", str, optional=True) or None
        if state is not None and state not in HISTORY_STATES:
            raise BadMessage("bad_field", f"unknown state {state!r}")
        return HistoryRequest(
            ref=_ref(data),
            queue=_field(data, "queue", str),
            before=_field(data, "before", str, optional=True) or None,
            state=state,
            task=_field(data, "task", str, optional=True) or None,
            limit=limit,
        )
    if kind == "command":
        action = _field(data, "action", str)
        if action not in ACTIONS:
            raise BadMessage("unknown_action", f"unknown action {action!r}")
        job = _field(data, "job", str, optional=True)
        if action in JOB_ACTIONS and job is None:
            raise BadMessage("bad_field", f"{action} needs a job id")
        if action not in JOB_ACTIONS and job is not None:
            raise BadMessage("bad_field", f"{action} acts on the queue: it takes no job id")
        return CommandRequest(
            ref=_ref(data),
            action=action,
            queue=_field(data, "queue", str),
            job=job,
            token=_field(data, "token", str, optional=True) or "",
        )
    raise BadMessage("unknown_type", f"unknown message type {kind!r}")
