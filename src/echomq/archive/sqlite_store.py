"""The SQLite store: one embedded file, no server (the archive's default).

WAL journal with ``synchronous=FULL``: a slice is on disk when ``write`` returns, so the
stream's XACK that follows never acknowledges what a power cut could take back. Writers
wait up to ``busy_timeout`` for a lock held by another process, then report
:class:`StoreUnavailable` (the archive retries). One connection, used by one thread at a
time (a lock guards it; ``trio.to_thread`` may run successive calls on different threads).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from .._model.completion import FinishedJob
from .sql import COLUMNS, INDEXES, META_CREATE, STATE_CHECK, history_sql, job_row, row_job
from .store import (
    META_TABLE,
    SCHEMA_VERSION,
    TABLE,
    ArchiveError,
    EntryRejected,
    HistoryQuery,
    StoreUnavailable,
    newer_schema,
    now_ms,
)

__all__ = ["SqliteStore"]

_CREATE = f"""
CREATE TABLE {{table}} (
    seq INTEGER PRIMARY KEY,
    queue TEXT NOT NULL,
    job_id TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    task TEXT,
    state TEXT NOT NULL CHECK ({STATE_CHECK}),
    result BLOB,
    error TEXT,
    reason TEXT,
    failures INTEGER,
    claimed_at INTEGER,
    finished_at INTEGER NOT NULL,
    stream_id TEXT NOT NULL,
    archived_at INTEGER NOT NULL,
    extra TEXT,
    UNIQUE (queue, job_id, attempts, created_at)
)"""

_INSERT = (
    f"INSERT INTO {TABLE} ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))}) "
    "ON CONFLICT (queue, job_id, attempts, created_at) DO NOTHING"
)


def _translate(display: str, exc: sqlite3.Error) -> ArchiveError:
    if isinstance(exc, sqlite3.OperationalError):
        return StoreUnavailable(f"SQLite archive {display}: {exc}")
    if isinstance(exc, sqlite3.IntegrityError | sqlite3.DataError):
        return EntryRejected(f"SQLite archive {display} refused a job: {exc}")
    return ArchiveError(f"SQLite archive {display}: {exc}")


class SqliteStore:
    """An archive in one SQLite file (see the module docstring)."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self.display = str(path)
        self._conn = conn
        self._lock = threading.Lock()

    @classmethod
    def open(cls, path: Path, *, create: bool = True, busy_timeout: float = 5.0) -> SqliteStore:
        """Open the file (creating it and the schema when ``create``).

        Raises:
            ArchiveError: the directory does not exist, the file is not an archive (or,
                with ``create=False``, there is none).
            SchemaMismatch: a newer echomq made it.
            StoreUnavailable: the file is locked or cannot be opened now.
        """
        display = str(path)
        if not path.parent.is_dir():
            raise ArchiveError(f"cannot make the archive {display}: no directory {path.parent}")
        if not create and not path.exists():
            raise ArchiveError(f"no archive at {display}: `echomq archive --to ...` makes one")
        try:
            conn = sqlite3.connect(
                path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise _translate(display, exc) from exc
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            cls._ensure_schema(conn, display, create)
        except sqlite3.Error as exc:
            conn.close()
            raise _translate(display, exc) from exc
        except BaseException:
            conn.close()
            raise
        return cls(path, conn)

    @staticmethod
    def _version(conn: sqlite3.Connection) -> int | None:
        exists = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (META_TABLE,)
        ).fetchone()
        if exists is None:
            return None
        row = conn.execute(
            f"SELECT value FROM {META_TABLE} WHERE name = 'schema_version'"
        ).fetchone()
        return int(row[0]) if row is not None else None

    @classmethod
    def _ensure_schema(cls, conn: sqlite3.Connection, display: str, create: bool) -> None:
        """Check the version (a read: no lock); take the write lock only to create it."""
        version = cls._version(conn)
        if version is None:
            if not create:
                raise ArchiveError(f"{display} is not an echomq archive (no schema version)")
            with _immediate(conn):
                conn.execute(META_CREATE)
                version = cls._version(conn)  # another process may have made it meanwhile
                if version is None:
                    conn.execute(_CREATE.format(table=TABLE))
                    cls._indexes(conn)
                    conn.execute(
                        f"INSERT INTO {META_TABLE} (name, value) VALUES ('schema_version', ?)",
                        (str(SCHEMA_VERSION),),
                    )
        if version is not None and version > SCHEMA_VERSION:
            raise newer_schema(display, version)
        if version is not None and version < SCHEMA_VERSION and create:
            cls._migrate(conn)

    @staticmethod
    def _indexes(conn: sqlite3.Connection) -> None:
        for name, columns in INDEXES.items():
            conn.execute(f"CREATE INDEX {name} ON {TABLE} {columns}")

    @classmethod
    def _migrate(cls, conn: sqlite3.Connection) -> None:
        """Version 1 to 2 (the state ``expired``): SQLite alters no CHECK, so the table is
        made again, its rows (and their ``seq``) copied, in one transaction; a reader of
        version 1 (``create=False``) reads it as it is."""
        with _immediate(conn):
            if (cls._version(conn) or SCHEMA_VERSION) < 2:  # (another writer may have done it)
                every = ", ".join(("seq", *COLUMNS))
                conn.execute(_CREATE.format(table=f"{TABLE}_v2"))
                conn.execute(f"INSERT INTO {TABLE}_v2 ({every}) SELECT {every} FROM {TABLE}")
                conn.execute(f"DROP TABLE {TABLE}")
                conn.execute(f"ALTER TABLE {TABLE}_v2 RENAME TO {TABLE}")
                cls._indexes(conn)
                conn.execute(
                    f"UPDATE {META_TABLE} SET value = ? WHERE name = 'schema_version'",
                    (str(SCHEMA_VERSION),),
                )

    def write(self, jobs: Sequence[FinishedJob]) -> int:
        """Store ``jobs`` in one transaction; answer how many were new."""
        stamp = now_ms()
        rows = [job_row(job, stamp) for job in jobs]
        with self._lock:
            conn = self._conn
            before = conn.total_changes
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany(_INSERT, rows)
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                try:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                raise _translate(self.display, exc) from exc
            return conn.total_changes - before

    def history(self, query: HistoryQuery) -> list[tuple[int, FinishedJob]]:
        sql, params = history_sql(TABLE, query, "?")
        with self._lock:
            try:
                rows = self._conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise _translate(self.display, exc) from exc
        return [row_job(row) for row in rows]

    def count(self, queue: str | None = None) -> int:
        with self._lock:
            try:
                if queue is None:
                    row = self._conn.execute(f"SELECT count(*) FROM {TABLE}").fetchone()
                else:
                    row = self._conn.execute(
                        f"SELECT count(*) FROM {TABLE} WHERE queue = ?", (queue,)
                    ).fetchone()
            except sqlite3.Error as exc:
                raise _translate(self.display, exc) from exc
        return int(row[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()


@contextmanager
def _immediate(conn: sqlite3.Connection) -> Iterator[None]:
    """A write transaction taken at once (BEGIN IMMEDIATE): committed when the block ends,
    rolled back when it raises."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
