"""echomq.testing: a private redis-server for tests and demos, from blocking code and from Trio."""

from __future__ import annotations

import functools
import socket
from pathlib import Path

import pytest
import trio

import echomq
from echomq.testing import (
    RedisServer,
    RedisServerError,
    find_redis_server,
    open_redis_server,
    serve_redis_server,
)


def _refuses(port: int) -> bool:
    """Nothing listens on 127.0.0.1:port."""
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_start_and_stop_own_the_process_port_and_directory() -> None:
    """start answers PING on a free loopback port; stop ends the process and removes its dir."""
    server = RedisServer().start()
    try:
        assert server.process is not None and server.process.poll() is None
        assert server.url == f"redis://127.0.0.1:{server.port}/0"
        assert server.dir is not None and server.dir.is_dir()
        directory, process = server.dir, server.process
    finally:
        server.stop()
    assert process.poll() is not None
    assert not directory.exists()
    assert _refuses(server.port)


def test_persistence_is_off_by_default_and_data_is_gone_after_restart() -> None:
    """Without AOF a killed and restarted server (same port) comes back empty."""
    with RedisServer() as server:
        import redis

        client = redis.Redis(port=server.port)
        client.set("k", "v")
        assert client.config_get("appendonly") == {"appendonly": "no"}
        assert client.config_get("save") == {"save": ""}
        port = server.port
        server.kill()
        assert _refuses(port)
        server.restart()
        assert server.port == port
        assert client.get("k") is None
        client.close()


def test_aof_on_request_keeps_data_across_a_kill() -> None:
    """appendonly=True: data written before SIGKILL is there after restart."""
    with RedisServer(appendonly=True) as server:
        import redis

        client = redis.Redis(port=server.port)
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        client.set("k", "kept")
        server.kill()
        server.restart()
        assert client.get("k") == b"kept"
        client.close()


async def test_tls_on_request() -> None:
    """tls=True serves TLS (verified against the CA the url names), and no plain TCP."""
    async with open_redis_server(tls=True) as server:
        assert server.url == (f"rediss://127.0.0.1:{server.port}/0?ssl_ca_certs={server.ca_file}")
        async with echomq.connect(server.url) as conn:
            assert await conn.execute("PING") == b"PONG"
            port = await conn.execute("CONFIG", "GET", "port")
        assert port == [b"port", b"0"]


async def test_open_redis_server_from_trio() -> None:
    """``async with open_redis_server()`` runs a server for the block and stops it after."""
    async with open_redis_server() as server:
        async with echomq.connect(server.url) as conn:
            assert await conn.execute("PING") == b"PONG"
        process = server.process
    assert process is not None and process.poll() is not None


async def test_serve_redis_server_with_nursery_start() -> None:
    """``nursery.start(serve_redis_server)`` answers the server; cancelling stops it."""
    async with trio.open_nursery() as nursery:
        server = await nursery.start(functools.partial(serve_redis_server, appendonly=True))
        process = server.process
        async with echomq.connect(server.url) as conn:
            assert await conn.execute("CONFIG", "GET", "appendonly") == [b"appendonly", b"yes"]
        nursery.cancel_scope.cancel()
    assert process is not None and process.poll() is not None


def test_missing_redis_server_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No redis-server on PATH: RedisServerError says what to install, before anything starts."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("ECHOMQ_REDIS_SERVER", raising=False)
    with pytest.raises(RedisServerError, match=r"redis-server was not found.*apt-get install"):
        RedisServer().start()


def test_explicit_binary_that_does_not_exist_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """ECHOMQ_REDIS_SERVER pointing nowhere names the variable in the error."""
    monkeypatch.setenv("ECHOMQ_REDIS_SERVER", str(tmp_path / "no-such-server"))
    with pytest.raises(RedisServerError, match="ECHOMQ_REDIS_SERVER"):
        find_redis_server()


def test_explicit_binary_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """ECHOMQ_REDIS_SERVER names the binary to run (a valkey-server, say)."""
    real = find_redis_server()
    monkeypatch.setenv("ECHOMQ_REDIS_SERVER", real)
    assert find_redis_server() == real


def test_server_that_exits_early_reports_its_own_message() -> None:
    """A bad option: RedisServerError carries redis-server's own complaint; nothing runs."""
    server = RedisServer(extra_args=("--no-such-directive", "x"))
    with pytest.raises(RedisServerError, match=r"(?s)exited early.*no-such-directive"):
        server.start()
    assert server.process is None
    server.stop()


def test_port_in_use_is_a_clear_error() -> None:
    """An explicit port someone else holds: RedisServerError says so."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        server = RedisServer(port=port)
        with pytest.raises(RedisServerError, match=f"port {port} is in use"):
            server.start()
        server.stop()
