"""The PostgreSQL store, through psycopg 3's blocking API (the archive calls it in a thread).

Why psycopg 3 (docs/results.md has the comparison): maintained, fully typed (``py.typed``),
thread-safe, with binary wheels (``psycopg[binary]``, the ``echomq[postgres]`` extra);
its async API is asyncio-only, as is asyncpg's, so from Trio the blocking API runs in
``trio.to_thread``: a slice costs one round trip either way.

A slice is one ``INSERT ... SELECT FROM unnest(...) ON CONFLICT DO NOTHING`` (one statement,
one round trip, any slice size) in its own transaction. A connection that breaks is
dropped and made again on the next call; until then calls raise :class:`StoreUnavailable`.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

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
    display_url,
    newer_schema,
    now_ms,
)

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresStore"]

_CREATE = f"""
CREATE TABLE {TABLE} (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue TEXT NOT NULL,
    job_id TEXT NOT NULL,
    attempts BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    task TEXT,
    state TEXT NOT NULL CONSTRAINT {TABLE}_state_check CHECK ({STATE_CHECK}),
    result BYTEA,
    error TEXT,
    reason TEXT,
    failures BIGINT,
    claimed_at BIGINT,
    finished_at BIGINT NOT NULL,
    stream_id TEXT NOT NULL,
    archived_at BIGINT NOT NULL,
    extra JSONB,
    UNIQUE (queue, job_id, attempts, created_at)
)"""

# one SQL type per COLUMNS entry
_TYPES = (
    "text", "text", "bigint", "bigint", "text", "text", "bytea", "text", "text", "bigint",
    "bigint", "bigint", "text", "bigint", "jsonb",
)  # fmt: skip
_INSERT = (
    f"INSERT INTO {TABLE} ({', '.join(COLUMNS)}) SELECT * FROM unnest("
    + ", ".join(f"%s::{t}[]" for t in _TYPES)
    + ") ON CONFLICT (queue, job_id, attempts, created_at) DO NOTHING"
)
_SCHEMA_LOCK = 0x656D715F61726368  # pg_advisory_xact_lock key: two archivers starting at once


def _driver() -> Any:
    try:
        import psycopg
    except ImportError:
        raise ArchiveError(
            "a postgresql:// archive needs psycopg 3: pip install 'echomq[postgres]'"
        ) from None
    return psycopg


def _translate(display: str, exc: Exception) -> ArchiveError:
    pg = _driver()
    if isinstance(exc, pg.OperationalError):
        return StoreUnavailable(f"PostgreSQL archive {display}: {exc}")
    if isinstance(exc, pg.DataError | pg.IntegrityError):
        return EntryRejected(f"PostgreSQL archive {display} refused a job: {exc}")
    return ArchiveError(f"PostgreSQL archive {display}: {exc}")


class PostgresStore:
    """An archive in a PostgreSQL database (see the module docstring)."""

    def __init__(self, url: str, conn: psycopg.Connection[Any], connect_timeout: float) -> None:
        self.url = url
        self.display = display_url(url)
        self._conn: psycopg.Connection[Any] | None = conn
        self._timeout = connect_timeout
        self._lock = threading.Lock()

    @classmethod
    def open(cls, url: str, *, create: bool = True, connect_timeout: float = 5.0) -> PostgresStore:
        """Connect, and make the schema when there is none (and ``create``).

        Raises:
            ArchiveError: psycopg is not installed, or (``create=False``) there is no archive.
            SchemaMismatch: a newer echomq made the schema.
            StoreUnavailable: the server cannot be reached now.
        """
        pg = _driver()
        display = display_url(url)
        conn = cls._connect(url, display, connect_timeout)
        try:
            cls._ensure_schema(conn, display, create)
        except pg.Error as exc:
            conn.close()
            raise _translate(display, exc) from exc
        except BaseException:
            conn.close()
            raise
        return cls(url, conn, connect_timeout)

    @staticmethod
    def _connect(url: str, display: str, timeout: float) -> psycopg.Connection[Any]:
        pg = _driver()
        try:
            conn: psycopg.Connection[Any] = pg.connect(
                url, autocommit=True, connect_timeout=max(1, round(timeout))
            )
        except pg.Error as exc:
            raise StoreUnavailable(f"PostgreSQL archive {display}: {exc}") from exc
        return conn

    @staticmethod
    def _version(conn: psycopg.Connection[Any]) -> int | None:
        exists = conn.execute("SELECT to_regclass(%s)", (META_TABLE,)).fetchone()
        if exists is None or exists[0] is None:
            return None
        row = conn.execute(
            f"SELECT value FROM {META_TABLE} WHERE name = 'schema_version'"
        ).fetchone()
        return int(row[0]) if row is not None else None

    @classmethod
    def _ensure_schema(cls, conn: psycopg.Connection[Any], display: str, create: bool) -> None:
        """Check the version; create the schema (under an advisory lock) when there is none."""
        version = cls._version(conn)
        if version is None:
            if not create:
                raise ArchiveError(f"{display} holds no echomq archive (no schema version)")
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                conn.execute(META_CREATE)
                version = cls._version(conn)  # another archiver may have made it meanwhile
                if version is None:
                    conn.execute(_CREATE)
                    for name, columns in INDEXES.items():
                        conn.execute(f"CREATE INDEX {name} ON {TABLE} {columns}")
                    conn.execute(
                        f"INSERT INTO {META_TABLE} (name, value) VALUES ('schema_version', %s)",
                        (str(SCHEMA_VERSION),),
                    )
        if version is not None and version > SCHEMA_VERSION:
            raise newer_schema(display, version)
        if version is not None and version < SCHEMA_VERSION and create:
            cls._migrate(conn)

    @classmethod
    def _migrate(cls, conn: psycopg.Connection[Any]) -> None:
        """Version 1 to 2 (the state ``expired``): the state CHECK widened, under the
        schema's advisory lock; a reader of version 1 (``create=False``) reads it as it is."""
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            if (cls._version(conn) or SCHEMA_VERSION) < 2:  # (another archiver may have)
                conn.execute(
                    f"ALTER TABLE {TABLE} DROP CONSTRAINT IF EXISTS {TABLE}_state_check, "
                    f"ADD CONSTRAINT {TABLE}_state_check CHECK ({STATE_CHECK})"
                )
                conn.execute(
                    f"UPDATE {META_TABLE} SET value = %s WHERE name = 'schema_version'",
                    (str(SCHEMA_VERSION),),
                )

    def _connection(self) -> psycopg.Connection[Any]:
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            if conn is not None:
                conn.close()
            self._conn = None
            conn = self._conn = self._connect(self.url, self.display, self._timeout)
        return conn

    def _run(self, work: Any) -> Any:
        """Run ``work(conn)`` under the lock; a broken connection is dropped for the next call."""
        pg = _driver()
        with self._lock:
            conn = self._connection()
            try:
                return work(conn)
            except pg.Error as exc:
                if conn.broken:
                    conn.close()
                raise _translate(self.display, exc) from exc

    def write(self, jobs: Sequence[FinishedJob]) -> int:
        """Store ``jobs`` in one transaction (one statement); answer how many were new."""
        if not jobs:
            return 0
        stamp = now_ms()
        rows = [job_row(job, stamp) for job in jobs]
        columns = [list(column) for column in zip(*rows, strict=True)]

        def work(conn: psycopg.Connection[Any]) -> int:
            with conn.transaction():
                cursor = conn.execute(_INSERT, columns)
                return max(cursor.rowcount, 0)

        inserted: int = self._run(work)
        return inserted

    def history(self, query: HistoryQuery) -> list[tuple[int, FinishedJob]]:
        sql, params = history_sql(TABLE, query, "%s")

        def work(conn: psycopg.Connection[Any]) -> list[Any]:
            return conn.execute(sql, params).fetchall()

        return [row_job(row) for row in self._run(work)]

    def count(self, queue: str | None = None) -> int:
        def work(conn: psycopg.Connection[Any]) -> int:
            if queue is None:
                row = conn.execute(f"SELECT count(*) FROM {TABLE}").fetchone()
            else:
                row = conn.execute(
                    f"SELECT count(*) FROM {TABLE} WHERE queue = %s", (queue,)
                ).fetchone()
            return int(row[0]) if row else 0

        counted: int = self._run(work)
        return counted

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
