"""The archive's consumer groups: one per store, and the names of its consumers.

Rule 1 (a group per store): every store reads a queue's completions stream in a consumer
group of its own, so two archivers of different stores each get every entry, and two
archivers of one store share the entries (each goes to one of them; the store keeps each
job once anyway). The name says where the store is, as any machine would reach it:

- SQLite: ``archive:sqlite:<host>:<absolute path>``. A file is on one machine, so its
  name carries the machine's host name: the same path on two hosts is two stores.
- PostgreSQL: ``archive:postgresql:<host>:<port>/<database>``, the server's address from
  the URL (port 5432 unless given). A server on the loopback or a local socket is the
  machine's own, so ``localhost`` is replaced by the machine's host name.

Two spellings of one store (a host and its IP address) make two groups: the store then gets
each entry twice and keeps it once; two stores never share a group. ``--group`` (the
``group=`` of :class:`~echomq.archive.Archiver`) names the group instead, for a host whose
name changes (a container) or to share a group on purpose.
Rule 2 (the move from the one group): before each store had its own group, every archive
read in the group ``archive`` (:data:`LEGACY_GROUP`). A store's group that does not exist
yet is created where that group stands, less the entries it still has pending (so those
are delivered again, and kept once): a deployment that archived through it goes on with
nothing skipped and nothing read twice. With no such group it is created at the stream's
first entry, as before.
Rule 3 (consumers): a consumer's default name is ``<host>:<pid>`` (two archivers on one host
differ). At its start an archiver warns when its consumer name was active in its group
less than ``claim_idle`` ago (another archiver has it, or this one restarted that fast),
and removes the consumers of its group that hold nothing and have been idle longer than
:data:`FORGET_IDLE_S` (the names left by earlier processes).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import attrs

from .._wire.connection import Connection
from ..completions import stream_key
from ..errors import InvalidArgument, ServerError
from .store import sqlite_path, store_kind

__all__ = [
    "FORGET_IDLE_S",
    "LEGACY_GROUP",
    "Consumer",
    "GroupStart",
    "check_group_name",
    "consumers",
    "create_group",
    "default_consumer",
    "forget_idle_consumers",
    "group_name",
]

log = logging.getLogger("echomq.archive")

LEGACY_GROUP = "archive"  # the one group every archive shared before a group per store
FORGET_IDLE_S = 3600.0  # a consumer idle this long (and at least 10 x claim_idle) is gone


def _host() -> str:
    return socket.gethostname() or "localhost"


def _local(host: str) -> bool:
    if not host or host.startswith("/") or host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def group_name(store_url: str) -> str:
    """The consumer group of the store ``store_url`` names (Rule 1). No I/O.

    Raises:
        InvalidArgument: not a store URL (``store_kind``).
    """
    if store_kind(store_url) == "sqlite":
        return f"archive:sqlite:{_host()}:{os.path.abspath(sqlite_path(store_url))}"
    parts = urlsplit(store_url)
    query = parse_qs(parts.query)
    host = query["host"][-1] if "host" in query else unquote(parts.hostname or "")
    port = query["port"][-1] if "port" in query else str(parts.port or 5432)
    database = query["dbname"][-1] if "dbname" in query else unquote(parts.path.lstrip("/"))
    where = _host() if _local(host) else host.lower()
    return f"archive:postgresql:{where}:{port}/{database or unquote(parts.username or '')}"


def default_consumer() -> str:
    """``<host>:<pid>``: this process's name in a group (Rule 3)."""
    return f"{_host()}:{os.getpid()}"


def check_group_name(group: object) -> str:
    """A group name given by hand: a non-empty str without spaces or control characters."""
    if not isinstance(group, str) or not group or not group.isprintable() or " " in group:
        raise InvalidArgument(f"a consumer group is a non-empty name without spaces: {group!r}")
    return group


@attrs.frozen
class GroupStart:
    """How :func:`create_group` found the group: ``created`` now (False: it existed), at
    ``at`` (a stream id; ``0`` is the stream's start), ``inherited`` from the legacy group."""

    created: bool
    at: str = "0"
    inherited: bool = False


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _pairs(flat: Any) -> dict[str, Any]:
    return {_s(flat[i]): flat[i + 1] for i in range(0, len(flat) - 1, 2)}


def _before(stream_id: str) -> str:
    """The id just before ``stream_id`` (a group created there delivers it next)."""
    ms, _, seq = stream_id.partition("-")
    if int(seq or 0) > 0:
        return f"{ms}-{int(seq) - 1}"
    if int(ms) > 0:
        return f"{int(ms) - 1}-18446744073709551615"
    return "0"


async def _legacy_position(conn: Connection, key: str) -> str | None:
    """Where the legacy group stands, less its pending entries; None when there is none."""
    try:
        groups = await conn.execute("XINFO", "GROUPS", key)
    except ServerError:
        return None
    for raw in groups:
        info = _pairs(raw)
        if _s(info.get("name", b"")) != LEGACY_GROUP:
            continue
        position = _s(info.get("last-delivered-id", b"0-0"))
        pending = await conn.execute("XPENDING", key, LEGACY_GROUP)
        if pending and int(pending[0]) > 0 and pending[1] is not None:
            position = _before(_s(pending[1]))
        return position
    return None


async def create_group(conn: Connection, queue: str, group: str) -> GroupStart:
    """Make ``group`` on the queue's completions stream if it does not exist (Rule 2):
    at the legacy group's position less its pending entries, else at the stream's start
    (the stream too, empty, when there is none)."""
    key = stream_key(queue)
    at, inherited = "0", False
    if group != LEGACY_GROUP:
        legacy = await _legacy_position(conn, key)
        if legacy is not None:
            at, inherited = legacy, True
    try:
        await conn.execute("XGROUP", "CREATE", key, group, at, "MKSTREAM")
    except ServerError as exc:
        if str(exc).startswith("BUSYGROUP"):
            return GroupStart(created=False)
        raise
    return GroupStart(created=True, at=at, inherited=inherited)


@attrs.frozen
class Consumer:
    """One consumer of a group (``XINFO CONSUMERS``): entries it holds, ms since it acted."""

    name: str
    pending: int
    idle_ms: int


async def consumers(conn: Connection, queue: str, group: str) -> list[Consumer]:
    """The consumers of ``group`` on the queue's completions stream ([] when none)."""
    try:
        raw = await conn.execute("XINFO", "CONSUMERS", stream_key(queue), group)
    except ServerError:
        return []
    found = []
    for item in raw:
        info = _pairs(item)
        found.append(
            Consumer(
                name=_s(info.get("name", b"")),
                pending=int(info.get("pending", 0)),
                idle_ms=int(info.get("idle", 0)),
            )
        )
    return found


async def forget_idle_consumers(
    conn: Connection, queue: str, group: str, *, keep: str, idle_s: float
) -> list[str]:
    """Remove the consumers of ``group`` (but ``keep``) that hold no entry and have been
    idle more than ``idle_s``; answer their names. One that holds entries is never removed
    (XAUTOCLAIM takes its entries over; removing it would drop them from the group). The
    look and the removal are two commands: a consumer silent for an hour that reads in
    between loses its read from the group's pending list (it still stores and acknowledges
    it; only its crash before that would leave those entries unread)."""
    gone = []
    for c in await consumers(conn, queue, group):
        if c.name != keep and c.pending == 0 and c.idle_ms > idle_s * 1000:
            await conn.execute("XGROUP", "DELCONSUMER", stream_key(queue), group, c.name)
            gone.append(c.name)
    return gone
