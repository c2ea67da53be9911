"""The completions stream's consumer-group reads: one round trip each, no loops.

The scripts append to ``emq:{q}:completions`` (one entry per finished job) and trim it
with ``MINID ~`` / ``MAXLEN ~``; readers here never write entries and never trim. A reader
group (the archive's is ``archive``) is created at ``0``, so it first reads what the
stream already holds. Replies are read as RESP2 arrays (the wire's protocol).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from ._scripts.keyspace import keyspace
from ._wire.connection import Connection
from .errors import ScriptError, ServerError

__all__ = [
    "AutoClaim",
    "Backlog",
    "GroupMissing",
    "StreamEntry",
    "compare_ids",
    "group_ack",
    "group_autoclaim",
    "group_create",
    "group_read",
    "stream_backlog",
    "stream_key",
]


class GroupMissing(ServerError):
    """The stream or its consumer group is gone (an obliterated queue): create it again."""


@attrs.frozen
class StreamEntry:
    """One entry: its id and flat ``[field, value, ...]`` list; ``fields`` is None when the
    entry was delivered but then trimmed away (XREADGROUP of pending entries answers so)."""

    id: str
    fields: list[bytes] | None


@attrs.frozen
class AutoClaim:
    """One XAUTOCLAIM page: where to go on (``0-0``: done), the entries now ours, and the
    ids that were pending but trimmed away (Redis removed them from the pending list)."""

    next: str
    entries: list[StreamEntry]
    deleted: list[str]


def _id_parts(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


def compare_ids(a: str, b: str) -> int:
    """-1, 0 or 1 as stream id ``a`` is before, equal to or after ``b``."""
    pa, pb = _id_parts(a), _id_parts(b)
    return (pa > pb) - (pa < pb)


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _entries(raw: Any) -> list[StreamEntry]:
    if not isinstance(raw, list):
        raise ScriptError(f"unexpected stream entries: {raw!r:.200}")
    entries = []
    for item in raw:
        if not isinstance(item, list) or len(item) != 2:
            raise ScriptError(f"unexpected stream entry: {item!r:.200}")
        fields = item[1]
        entries.append(StreamEntry(_s(item[0]), list(fields) if fields is not None else None))
    return entries


def _missing(exc: ServerError) -> bool:
    text = str(exc)
    return text.startswith("NOGROUP") or "no such key" in text.lower()


def stream_key(queue: str) -> str:
    """The completions stream's key for ``queue`` (validated)."""
    return keyspace(queue).completions


async def group_create(conn: Connection, queue: str, group: str) -> bool:
    """Create ``group`` at id 0 (the stream too, empty, if it does not exist yet).

    Answers False when the group already exists.
    """
    try:
        await conn.execute("XGROUP", "CREATE", stream_key(queue), group, "0", "MKSTREAM")
    except ServerError as exc:
        if str(exc).startswith("BUSYGROUP"):
            return False
        raise
    return True


async def group_read(
    conn: Connection,
    queue: str,
    group: str,
    consumer: str,
    *,
    count: int,
    block_ms: int | None = None,
    after: str = ">",
) -> list[StreamEntry]:
    """XREADGROUP: new entries (``after=">"``, waiting up to ``block_ms``), or this
    consumer's own pending entries after an id (``after="0"`` to start).

    Raises:
        GroupMissing: the stream or the group does not exist.
    """
    command: list[str | int] = ["XREADGROUP", "GROUP", group, consumer, "COUNT", count]
    if block_ms is not None:
        command += ["BLOCK", block_ms]
    command += ["STREAMS", stream_key(queue), after]
    try:
        reply = await conn.execute(*command)
    except ServerError as exc:
        if _missing(exc):
            raise GroupMissing(str(exc)) from None
        raise
    if reply is None:
        return []
    return _entries(reply[0][1])


async def group_ack(conn: Connection, queue: str, group: str, ids: Sequence[str]) -> int:
    """XACK: answers how many of ``ids`` were pending (and now are not)."""
    if not ids:
        return 0
    acked: int = await conn.execute("XACK", stream_key(queue), group, *ids)
    return acked


async def group_autoclaim(
    conn: Connection,
    queue: str,
    group: str,
    consumer: str,
    *,
    min_idle_ms: int,
    start: str = "0-0",
    count: int = 100,
) -> AutoClaim:
    """XAUTOCLAIM: take over entries pending longer than ``min_idle_ms`` (a dead consumer's).

    Raises:
        GroupMissing: the stream or the group does not exist.
    """
    try:
        reply = await conn.execute(
            "XAUTOCLAIM", stream_key(queue), group, consumer, min_idle_ms, start, "COUNT", count
        )
    except ServerError as exc:
        if _missing(exc):
            raise GroupMissing(str(exc)) from None
        raise
    deleted = [_s(x) for x in reply[2]] if len(reply) > 2 else []
    return AutoClaim(_s(reply[0]), _entries(reply[1]), deleted)


@attrs.frozen(kw_only=True)
class Backlog:
    """What a group has not finished with, read in one round trip (XINFO, XPENDING, TIME).

    ``lag`` is Redis's count of entries not yet delivered to the group (None when Redis
    cannot tell); ``pending`` counts delivered entries not yet acknowledged.
    """

    server_ms: int
    exists: bool
    length: int = 0
    first_id: str | None = None
    last_id: str | None = None
    group_exists: bool = False
    last_delivered: str = "0-0"
    lag: int | None = None
    pending: int = 0
    oldest_pending: str | None = None

    @property
    def undelivered(self) -> bool:
        """Entries newer than the group's last delivered one exist."""
        return self.last_id is not None and compare_ids(self.last_id, self.last_delivered) > 0

    @property
    def oldest_unfinished_ms(self) -> int | None:
        """Server ms of the oldest entry not yet acknowledged (pending or undelivered)."""
        candidates = []
        if self.oldest_pending is not None:
            candidates.append(_id_parts(self.oldest_pending)[0])
        if self.undelivered:
            nxt = self.last_delivered
            if self.first_id is not None and compare_ids(self.first_id, nxt) > 0:
                nxt = self.first_id
            candidates.append(_id_parts(nxt)[0])  # the next one is at or after this ms
        return min(candidates) if candidates else None

    @property
    def unfinished(self) -> int:
        """Entries not yet acknowledged: pending plus not yet delivered (lag)."""
        return self.pending + (self.lag or 0)

    @property
    def lost_unread(self) -> int:
        """Entries trimmed before the group read them (a lower bound; 0 when unknown).

        Only knowable while the group's last delivered id is before the stream's first
        entry: then every entry in the stream is undelivered, and what the group has not
        read beyond those is gone.
        """
        if self.lag is None:
            return 0
        if self.first_id is not None and compare_ids(self.last_delivered, self.first_id) >= 0:
            return 0
        return max(0, self.lag - self.length)


def _pairs(flat: Any) -> dict[str, Any]:
    return {_s(flat[i]): flat[i + 1] for i in range(0, len(flat) - 1, 2)}


async def stream_backlog(conn: Connection, queue: str, group: str) -> Backlog:
    """The stream's length and ends, and ``group``'s position, lag and pending entries."""
    key = stream_key(queue)
    time_reply, stream, groups, pending = await conn.execute_pipeline(
        [["TIME"], ["XINFO", "STREAM", key], ["XINFO", "GROUPS", key], ["XPENDING", key, group]]
    )
    if isinstance(time_reply, ServerError):
        raise time_reply
    server_ms = int(time_reply[0]) * 1000 + int(time_reply[1]) // 1000
    if isinstance(stream, ServerError):
        if _missing(stream):
            return Backlog(server_ms=server_ms, exists=False)
        raise stream
    info = _pairs(stream)
    first, last = info.get("first-entry"), info.get("last-entry")
    fields: dict[str, Any] = {
        "server_ms": server_ms,
        "exists": True,
        "length": int(info.get("length", 0)),
        "first_id": _s(first[0]) if first else None,
        "last_id": _s(last[0]) if last else None,
    }
    if not isinstance(groups, ServerError):
        for raw in groups:
            g = _pairs(raw)
            if _s(g.get("name", b"")) == group:
                lag = g.get("lag")
                fields.update(
                    group_exists=True,
                    last_delivered=_s(g.get("last-delivered-id", b"0-0")),
                    lag=int(lag) if lag is not None else None,
                )
    if fields.get("group_exists") and not isinstance(pending, ServerError):
        fields["pending"] = int(pending[0])
        fields["oldest_pending"] = _s(pending[1]) if pending[1] is not None else None
    return Backlog(**fields)
