"""One error type per cause, the same on the trio wire and on the sync producer (redis-py).

Wrong or missing credentials, an ACL refusal and a TLS failure are typed errors that are
*not* ``ConnectionLost``: code that retries on ``ConnectionLost`` must not loop on them.
A refused or dropped connection stays ``ConnectionLost``. Each cause is checked through a
plain command and through a script call, on both drivers.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterator

import pytest
import trio

import echomq
import echomq.asyncio
import echomq.sync
from echomq import jobs
from echomq.errors import (
    TRANSIENT,
    AuthenticationError,
    ConnectionLost,
    EchoMQError,
    PermissionDenied,
    ServerError,
    TLSError,
    Unavailable,
)
from echomq.testing import RedisServer, drop_redis, free_port


@pytest.fixture(scope="module")
def acl_server() -> Iterator[RedisServer]:
    """A redis-server with a password and an ACL user that may only touch ``other:*``."""
    extra = ("--user", "narrow", "on", ">narrow-pw", "~other:*", "&*", "+@all")
    with RedisServer(password="s3cr3t", extra_args=extra) as server:
        yield server


def _causes(acl: RedisServer, tls: RedisServer) -> dict[str, tuple[str, type[EchoMQError], str]]:
    """cause -> (url, error type, a word of its message)."""
    return {
        "wrong password": (
            f"redis://:nope@127.0.0.1:{acl.port}/0",
            AuthenticationError,
            "WRONGPASS",
        ),
        "missing password": (f"redis://127.0.0.1:{acl.port}/0", AuthenticationError, "NOAUTH"),
        "acl user without permission": (
            f"redis://narrow:narrow-pw@127.0.0.1:{acl.port}/0",
            PermissionDenied,
            "NOPERM",
        ),
        "untrusted certificate": (f"rediss://127.0.0.1:{tls.port}/0", TLSError, "certificate"),
        "nothing listening": (f"redis://127.0.0.1:{free_port()}/0", ConnectionLost, ""),
    }


CAUSES = [
    "wrong password",
    "missing password",
    "acl user without permission",
    "untrusted certificate",
    "nothing listening",
]


def _check(exc: BaseException, expected: type[EchoMQError], word: str) -> None:
    assert type(exc) is expected, repr(exc)
    assert word in str(exc)
    if expected is not ConnectionLost:
        assert not isinstance(exc, ConnectionLost | ConnectionError | OSError)


@pytest.mark.parametrize("cause", CAUSES)
@pytest.mark.parametrize("call", ["command", "script"])
async def test_trio_wire_raises_one_type_per_cause(
    acl_server: RedisServer, tls_server: RedisServer, queue: str, cause: str, call: str
) -> None:
    url, expected, word = _causes(acl_server, tls_server)[cause]
    if call == "command" and cause == "acl user without permission":
        word = "NOPERM"
    async with echomq.connect(url, connect_timeout=1) as conn:
        run: Callable[[], Awaitable[object]] = (
            (lambda: conn.execute("SET", f"{queue}:k", "v"))
            if call == "command"
            else (lambda: jobs.enqueue(conn, queue, b"x"))
        )
        with trio.fail_after(5), pytest.raises(EchoMQError) as caught:
            await run()
    _check(caught.value, expected, word)


@pytest.mark.parametrize("cause", CAUSES)
@pytest.mark.parametrize("call", ["command", "script"])
def test_sync_producer_raises_the_same_types(
    acl_server: RedisServer, tls_server: RedisServer, queue: str, cause: str, call: str
) -> None:
    url, expected, word = _causes(acl_server, tls_server)[cause]
    with echomq.sync.connect(url, connect_timeout=1) as mq:
        with pytest.raises(EchoMQError) as caught:
            if call == "command":
                mq.get_job(queue, "some-job")
            else:
                mq.enqueue(queue, b"x")
    _check(caught.value, expected, word)


def test_typed_refusals_are_server_errors_and_tls_is_not() -> None:
    """AuthenticationError and PermissionDenied are server answers (``except ServerError``
    still catches them); TLSError is its own; none is a ConnectionLost."""
    assert issubclass(AuthenticationError, ServerError)
    assert issubclass(PermissionDenied, ServerError)
    assert not issubclass(TLSError, ServerError | ConnectionLost | OSError)


async def test_a_dropped_connection_stays_connection_lost(queue: str) -> None:
    """The server killed under an open connection: ConnectionLost on both drivers."""
    with RedisServer() as server:
        async with echomq.connect(server.url, connect_timeout=0.5) as conn:
            await jobs.enqueue(conn, queue, b"x")
            mq = echomq.sync.connect(server.url, connect_timeout=0.5)
            mq.enqueue(queue, b"x")
            async with drop_redis(server):
                with pytest.raises(ConnectionLost):
                    await jobs.enqueue(conn, queue, b"x")
                with pytest.raises(ConnectionLost):
                    mq.enqueue(queue, b"x")
            mq.close()


async def test_pubsub_raises_the_same_types(
    acl_server: RedisServer, tls_server: RedisServer
) -> None:
    """The event subscription (a connection of its own) types its refusals the same way."""
    from echomq.events import open_event_feed

    causes = _causes(acl_server, tls_server)
    for cause in ("wrong password", "missing password", "untrusted certificate"):
        url, expected, word = causes[cause]
        with trio.fail_after(5), pytest.raises(EchoMQError) as caught:
            async with open_event_feed(url + "?connect_timeout=1", f"q-{uuid.uuid4().hex[:6]}"):
                pass
        _check(caught.value, expected, word)


async def test_a_transient_refusal_past_connect_timeout_is_unavailable_on_both_drivers(
    queue: str,
) -> None:
    """BUSY (a runaway script) says "not run, later": both wires send it again until
    connect_timeout, then raise Unavailable, a transient error (``errors.TRANSIENT``) that
    the worker's loops retry, unlike a plain ServerError. So do the asyncio driver and the
    blocking one under the verbs (``mq.is_paused`` runs ``admin.is_paused`` on it)."""
    with RedisServer(extra_args=("--lua-time-limit", "20")) as server:
        async with (
            echomq.connect(server.url) as runner,
            echomq.connect(server.url, connect_timeout=0.2) as caller,
            echomq.connect(server.url) as admin,
        ):
            await caller.execute("PING")
            await admin.execute("PING")
            mq = echomq.sync.connect(server.url, connect_timeout=0.2)
            mq.get_job(queue, "warm-up")  # its socket is open before the server is busy

            def on_asyncio() -> object:
                async def get() -> object:
                    async with echomq.asyncio.connect(server.url, connect_timeout=0.2) as aconn:
                        return await aconn.execute("GET", queue)

                return asyncio.run(get())

            async def runaway() -> None:
                with pytest.raises(ServerError, match="killed"):
                    await runner.execute("EVAL", "while true do end", 0)

            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(runaway)
                    while True:  # past lua-time-limit, the server answers BUSY
                        try:
                            await caller.execute("PING")
                        except Unavailable:
                            break
                    for run in (
                        lambda: caller.execute("GET", queue),
                        lambda: jobs.enqueue(caller, queue, b"x"),
                        lambda: trio.to_thread.run_sync(mq.get_job, queue, "j"),
                        lambda: trio.to_thread.run_sync(mq.enqueue, queue, b"x"),
                        lambda: trio.to_thread.run_sync(mq.is_paused, queue),
                        lambda: trio.to_thread.run_sync(on_asyncio),
                    ):
                        with pytest.raises(Unavailable, match=r"^BUSY") as caught:
                            await run()
                        assert isinstance(caught.value, TRANSIENT)
                    assert await admin.execute("SCRIPT", "KILL") == b"OK"
            mq.close()
