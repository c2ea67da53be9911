"""Fixtures for the archive: a private PostgreSQL server (one per session), fresh stores.

PostgreSQL comes from Debian's ``postgresql`` package (``./run test`` installs it where
apt-get can); where it is absent, or psycopg is not installed, the PostgreSQL cases are
skipped with the reason. SQLite stores are files under ``tmp_path``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from echomq.testing import PostgresServer, PostgresServerError, find_postgres_bin


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed (pip install 'echomq[postgres]'): PostgreSQL skipped")
    try:
        find_postgres_bin()
    except PostgresServerError as exc:
        pytest.skip(f"PostgreSQL tests skipped: {exc}")
    with PostgresServer() as server:
        yield server


def new_database(server: PostgresServer) -> str:
    """A fresh, empty database on ``server``; answers its URL."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return server.database_url(name)


@pytest.fixture
def pg_url(postgres_server: PostgresServer) -> str:
    """An empty PostgreSQL database of this test's own."""
    return new_database(postgres_server)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """An SQLite archive file of this test's own (not yet created)."""
    return f"sqlite:///{tmp_path / 'archive.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each store in turn: an SQLite file, then a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'archive.db'}"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return new_database(server)
