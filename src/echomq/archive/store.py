"""The archive's stores: what every store does, which store a URL names, and their errors.

A store is blocking code (stdlib ``sqlite3``, or psycopg 3 for PostgreSQL); the archive
calls it through ``trio.to_thread``, one call at a time per store.

Rule 1: ``write`` stores a slice in one transaction. A job is identified by
``(queue, id, attempts, created_at)``: writing it again (a re-delivered entry) changes
nothing, so a crash between the commit and the stream's XACK costs nothing but a retry.
Rule 2: a store refuses a schema newer than its code (:class:`SchemaMismatch`), before any
write; it creates the schema when there is none.
Rule 3: errors are sorted for the caller: :class:`StoreUnavailable` (try again later: the
server is down, the file is locked), :class:`EntryRejected` (this job's data cannot be
stored: skip it), anything else is :class:`ArchiveError` (stop: the store is not usable).

URLs: ``postgresql://`` (or ``postgres://``) names a PostgreSQL database; ``sqlite:///path``
(``sqlite:////abs/path``; ``?timeout=SECONDS`` to wait for another writer's lock, default
5), or a plain file path, names an SQLite file.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol
from urllib.parse import parse_qs, urlsplit

import attrs

from .._model.completion import FinishedJob, FinishState
from ..errors import EchoMQError, InvalidArgument

__all__ = [
    "ArchiveError",
    "DEFAULT_STORE",
    "EntryRejected",
    "HistoryQuery",
    "SCHEMA_VERSION",
    "SchemaMismatch",
    "Store",
    "StoreUnavailable",
    "default_store_url",
    "display_url",
    "open_store",
    "store_kind",
]

# 2: the state `expired` (docs/runtime.md "Expiry"); a store of version 1 is migrated by
# the first writer that opens it (its state CHECK widened), and read as it is
SCHEMA_VERSION = 2
DEFAULT_STORE = "sqlite:///echomq-archive.db"
TABLE = "emq_finished_jobs"
META_TABLE = "emq_archive_meta"


class ArchiveError(EchoMQError):
    """The archive store cannot be used (a bad URL, a schema it does not know, a bug)."""


class StoreUnavailable(ArchiveError):
    """The store cannot be reached or is busy right now; the archive retries with backoff."""


class EntryRejected(ArchiveError):
    """The store refused one job's data (its own fault, not the store's): logged and skipped."""


class SchemaMismatch(ArchiveError):
    """The store holds a schema version this echomq does not know (a newer echomq made it)."""


def newer_schema(display: str, found: int) -> SchemaMismatch:
    return SchemaMismatch(
        f"the archive at {display} has schema version {found}, but this echomq knows "
        f"versions up to {SCHEMA_VERSION}: upgrade echomq to read or write it"
    )


@attrs.frozen(kw_only=True)
class HistoryQuery:
    """Which finished jobs to read, newest first: ``before`` is a position (finished_at, seq)
    from an earlier page."""

    queue: str
    task: str | None = None
    state: FinishState | None = None
    job_id: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    limit: int = 50
    before: tuple[int, int] | None = None


class Store(Protocol):
    """The blocking interface of an archive store (see the module's rules)."""

    display: str

    def write(self, jobs: Sequence[FinishedJob]) -> int:
        """Store ``jobs`` in one transaction; answer how many were new."""

    def history(self, query: HistoryQuery) -> list[tuple[int, FinishedJob]]:
        """Jobs matching ``query``, newest first, each with its position (``seq``)."""

    def count(self, queue: str | None = None) -> int:
        """How many jobs the store holds (for one queue, or all)."""

    def close(self) -> None:
        """Release the connection; the store may not be used after."""


def store_kind(url: str) -> str:
    """``"postgresql"`` or ``"sqlite"`` for a store URL (checked: no I/O).

    Raises:
        InvalidArgument: the URL names another scheme, or is a malformed SQLite URL.
    """
    if not isinstance(url, str) or not url:
        raise InvalidArgument("the archive store URL must be a non-empty str")
    scheme, sep, _ = url.partition("://")
    scheme = scheme.lower()
    if sep and scheme in ("postgresql", "postgres"):
        return "postgresql"
    if not sep or scheme == "sqlite":  # a plain path, or sqlite:///path
        sqlite_path(url)
        sqlite_timeout(url)
        return "sqlite"
    raise InvalidArgument(
        f"unsupported archive store {url!r}: use sqlite:///path/to/file.db (or a path) "
        "or postgresql://user@host:port/database"
    )


def sqlite_path(url: str) -> Path:
    """The file an SQLite URL (or plain path) names: ``sqlite:///rel.db``, ``sqlite:////abs.db``."""
    if "://" not in url:
        return Path(url)
    rest = url.split("://", 1)[1]
    if not rest.startswith("/") or rest == "/":
        raise InvalidArgument(f"an SQLite URL is sqlite:///path/to/file.db, not {url!r}")
    path = rest[1:].split("?", 1)[0]
    if not path:
        raise InvalidArgument(f"an SQLite URL needs a file path: {url!r}")
    return Path(path)


def sqlite_timeout(url: str) -> float:
    """``?timeout=SECONDS`` of an SQLite URL: how long a write waits for another process's
    lock before the store reports itself unavailable (default 5)."""
    query = parse_qs(urlsplit(url).query) if "://" in url else {}
    if "timeout" not in query:
        return 5.0
    text = query["timeout"][-1]
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 3600:
        raise InvalidArgument(f"timeout must be seconds in [0, 3600), not {text!r}")
    return value


def display_url(url: str) -> str:
    """The store URL without credentials or options, for logs and messages."""
    if store_kind(url) == "sqlite":
        return str(sqlite_path(url))
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def default_store_url() -> str:
    """``$ECHOMQ_ARCHIVE_URL``, else ``sqlite:///echomq-archive.db`` (in the current directory)."""
    return os.environ.get("ECHOMQ_ARCHIVE_URL") or DEFAULT_STORE


def open_store(url: str, *, create: bool = True) -> Store:
    """Open the store ``url`` names (creating it on first use when ``create``). Blocking.

    Raises:
        InvalidArgument: a URL of another kind.
        StoreUnavailable: the store cannot be reached now.
        SchemaMismatch: the store was made by a newer echomq.
        ArchiveError: the PostgreSQL driver is not installed, the store is unusable, or
            (``create=False``) there is no archive there.
    """
    if store_kind(url) == "postgresql":
        from .postgres_store import PostgresStore

        return PostgresStore.open(url, create=create)
    from .sqlite_store import SqliteStore

    return SqliteStore.open(sqlite_path(url), create=create, busy_timeout=sqlite_timeout(url))


def now_ms() -> int:
    """This machine's clock in ms (the store's ``archived_at``; history's ``--since``)."""
    return int(dt.datetime.now(dt.UTC).timestamp() * 1000)
