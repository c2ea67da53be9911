"""Where and as whom the wire connects: TLS, password, ACL users, unix sockets, db numbers."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
import trio

import echomq
from echomq.errors import AuthenticationError, ConnectionLost, PermissionDenied, TLSError
from echomq.testing import RedisServer, restart_redis


def _client_info(reply: bytes) -> dict[str, str]:
    return dict(field.split("=", 1) for field in reply.decode().split() if "=" in field)


async def test_tls_round_trip_with_the_servers_ca(tls_server: RedisServer, queue: str) -> None:
    """rediss:// with ssl_ca_certs verifies the self-signed chain and carries commands."""
    assert tls_server.url.startswith("rediss://")
    async with echomq.connect(tls_server.url) as conn:
        assert await conn.execute("SET", queue, b"\x00secret\r\n") == b"OK"
        assert await conn.execute("GET", queue) == b"\x00secret\r\n"


async def test_tls_many_callers_share_one_tls_connection(tls_server: RedisServer) -> None:
    """Auto-pipelining works over TLS too: 200 concurrent callers get their own replies."""
    got: dict[int, bytes] = {}
    async with echomq.connect(tls_server.url) as conn:

        async def call(i: int) -> None:
            got[i] = await conn.execute("ECHO", str(i))

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                for i in range(200):
                    nursery.start_soon(call, i)
    assert got == {i: str(i).encode() for i in range(200)}


async def test_tls_certificate_that_fails_verification_is_refused_at_once(
    tls_server: RedisServer,
) -> None:
    """Without the test CA the certificate is untrusted: TLSError (not a ConnectionLost),
    no retry loop."""
    url = f"rediss://127.0.0.1:{tls_server.port}/0"
    async with echomq.connect(url, connect_timeout=5) as conn:
        with trio.fail_after(2), pytest.raises(TLSError, match="certificate"):
            await conn.execute("PING")


async def test_tls_without_verification_when_asked(tls_server: RedisServer) -> None:
    """ssl_cert_reqs=none connects without a CA (encrypted, not authenticated)."""
    url = f"rediss://127.0.0.1:{tls_server.port}/0?ssl_cert_reqs=none"
    async with echomq.connect(url) as conn:
        assert await conn.execute("PING") == b"PONG"


async def test_tls_connection_recovers_after_restart(queue: str) -> None:
    """A TLS server killed and restarted (same CA) is reconnected to by the same Connection."""
    with RedisServer(tls=True) as server:
        async with echomq.connect(server.url) as conn:
            assert await conn.execute("PING") == b"PONG"
            await restart_redis(server)
            with trio.fail_after(5):
                while True:
                    try:
                        assert await conn.execute("SET", queue, "v") == b"OK"
                        break
                    except ConnectionLost:  # the command that met the dead socket
                        pass
            assert conn.reconnects == 1


async def test_password_only_auth(password_server: RedisServer) -> None:
    """redis://:password@ authenticates the default user."""
    assert password_server.url.startswith("redis://:s3cr3t@")
    async with echomq.connect(password_server.url) as conn:
        assert await conn.execute("ACL", "WHOAMI") == b"default"


async def test_wrong_password_is_a_clear_error(password_server: RedisServer) -> None:
    """A wrong password raises AuthenticationError naming AUTH and WRONGPASS, at once."""
    url = f"redis://:nope@127.0.0.1:{password_server.port}/0"
    async with echomq.connect(url, connect_timeout=5) as conn:
        with trio.fail_after(2), pytest.raises(AuthenticationError, match="AUTH failed: WRONGPASS"):
            await conn.execute("PING")


async def test_missing_password_is_noauth(password_server: RedisServer) -> None:
    """No password for a server that needs one: AuthenticationError saying NOAUTH."""
    async with echomq.connect(f"redis://127.0.0.1:{password_server.port}/0") as conn:
        with pytest.raises(AuthenticationError, match="NOAUTH"):
            await conn.execute("PING")


@pytest.fixture
async def acl_user(password_server: RedisServer) -> tuple[str, str]:
    """A fresh ACL user with a password full of URL-special characters."""
    user, password = f"u{uuid.uuid4().hex[:8]}", "p@ss:w/rd %?#"
    async with echomq.connect(password_server.url) as admin:
        reply = await admin.execute(
            "ACL", "SETUSER", user, "on", f">{password}", "~app:*", "&*", "+@all", "-flushall"
        )
        assert reply == b"OK"
    return user, password


async def test_acl_user_login(password_server: RedisServer, acl_user: tuple[str, str]) -> None:
    """redis://user:password@ (percent-encoded) logs in as that ACL user, with its permissions."""
    user, password = acl_user
    url = f"redis://{quote(user)}:{quote(password, safe='')}@127.0.0.1:{password_server.port}/0"
    async with echomq.connect(url) as conn:
        assert await conn.execute("ACL", "WHOAMI") == user.encode()
        assert await conn.execute("SET", "app:x", "1") == b"OK"
        with pytest.raises(PermissionDenied, match="NOPERM"):
            await conn.execute("SET", "other:x", "1")


async def test_acl_user_with_wrong_password_is_refused(
    password_server: RedisServer, acl_user: tuple[str, str]
) -> None:
    """The right user with the wrong password: AuthenticationError with WRONGPASS."""
    user, _ = acl_user
    async with echomq.connect(f"redis://{user}:wrong@127.0.0.1:{password_server.port}/0") as conn:
        with pytest.raises(AuthenticationError, match="WRONGPASS"):
            await conn.execute("PING")


@pytest.fixture(scope="module")
def unix_server() -> Iterator[tuple[RedisServer, str]]:
    """A redis-server that also listens on a unix socket (a short path: sun_path is small)."""
    directory = Path(tempfile.mkdtemp(prefix="emq-"))
    path = str(directory / "redis.sock")
    try:
        with RedisServer(extra_args=("--unixsocket", path, "--unixsocketperm", "700")) as server:
            yield server, path
    finally:
        shutil.rmtree(directory, ignore_errors=True)


async def test_unix_socket(unix_server: tuple[RedisServer, str], queue: str) -> None:
    """unix:///path reaches the server through its socket file."""
    _, path = unix_server
    async with echomq.connect(f"unix://{path}") as conn:
        assert await conn.execute("SET", queue, "via-unix") == b"OK"
        assert await conn.execute("GET", queue) == b"via-unix"
        assert _client_info(await conn.execute("CLIENT", "INFO"))["addr"].startswith("/")


async def test_unix_socket_with_db(unix_server: tuple[RedisServer, str]) -> None:
    """unix:///path?db=N selects that database."""
    _, path = unix_server
    async with echomq.connect(f"unix://{path}?db=2") as conn:
        assert _client_info(await conn.execute("CLIENT", "INFO"))["db"] == "2"


async def test_db_is_selected_and_kept_across_reconnects(
    redis_server: RedisServer, queue: str
) -> None:
    """redis://host/5 works in db 5, and a reconnected socket selects db 5 again."""
    db5 = redis_server.url.replace("/0", "/5")
    async with echomq.connect(db5) as conn5, echomq.connect(redis_server.url) as conn0:
        await conn5.execute("SET", queue, "five")
        assert await conn0.execute("GET", queue) is None
        conn5.drop()
        assert await conn5.execute("GET", queue) == b"five"
        assert conn5.reconnects == 1
        assert _client_info(await conn5.execute("CLIENT", "INFO"))["db"] == "5"
        await conn5.execute("DEL", queue)


async def test_client_name_is_set(redis_server: RedisServer) -> None:
    """?client_name=NAME names the connection (CLIENT SETNAME) for CLIENT LIST."""
    async with echomq.connect(redis_server.url + "?client_name=emq-wire-test") as conn:
        assert await conn.execute("CLIENT", "GETNAME") == b"emq-wire-test"
