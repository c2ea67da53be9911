"""echomq.testing.PostgresServer: a private PostgreSQL that starts, crashes, restarts and
goes away, touching no system-wide cluster."""

from __future__ import annotations

import socket

import pytest

from echomq.testing import PostgresServer, PostgresServerError, find_postgres_bin


def _refuses(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_kill_keeps_the_data_restart_recovers_it_stop_removes_it(
    postgres_server: PostgresServer,
) -> None:
    """A crash (SIGKILL to every backend) loses no committed row; stop frees the port and
    removes the directory."""
    import psycopg

    with PostgresServer() as server:
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (x int)")
            conn.execute("INSERT INTO t VALUES (42)")
        port, directory = server.port, server.dir
        assert directory is not None and (directory / "data" / "PG_VERSION").exists()
        server.kill()
        assert _refuses(port)
        server.restart()
        assert server.port == port
        with psycopg.connect(server.url) as conn:
            assert conn.execute("SELECT x FROM t").fetchone() == (42,)
    assert _refuses(port)
    assert not directory.exists()


def test_a_bad_binary_directory_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ECHOMQ_PG_BIN", "/nonexistent")
    with pytest.raises(PostgresServerError, match="ECHOMQ_PG_BIN"):
        find_postgres_bin()
    with pytest.raises(PostgresServerError, match="ECHOMQ_PG_BIN"):
        PostgresServer().start()
