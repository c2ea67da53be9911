"""A lone caller reads its own reply (docs/wire.md, "A lone caller"): the reply order, its
cancellation, the callers that come in line behind it, and a socket closed while idle."""

from __future__ import annotations

import uuid

import trio
import trio.testing

import echomq
from _waits import until
from echomq.errors import ConnectionLost
from echomq.testing import RedisServer


async def test_callers_behind_a_lone_reader_get_their_own_replies(
    redis_server: RedisServer,
) -> None:
    """A lone BLPOP reads the socket itself; callers that queue behind it meanwhile get
    their replies (read by it or by the reader task), each its own, in order."""
    key = f"direct:{uuid.uuid4().hex}"
    async with echomq.connect(redis_server.url) as conn, echomq.connect(redis_server.url) as other:
        await conn.execute("PING")  # one reply woke one caller: the next lone call reads itself
        got: dict[str, object] = {}

        async def blpop() -> None:
            got["blpop"] = await conn.execute("BLPOP", key, 5)

        async def echo(i: int) -> None:
            got[f"echo{i}"] = await conn.execute("ECHO", f"e{i}")

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(blpop)
                await trio.testing.wait_all_tasks_blocked()
                assert conn._session is not None and conn._session.direct  # reads itself
                for i in range(20):
                    nursery.start_soon(echo, i)
                await trio.testing.wait_all_tasks_blocked()
                assert not got  # all held behind the BLPOP
                await other.execute("RPUSH", key, "v")
        assert got.pop("blpop") == [key.encode(), b"v"]
        assert got == {f"echo{i}": f"e{i}".encode() for i in range(20)}
        # the pipe is idle again: a lone call reads its own reply once more
        assert await conn.execute("ECHO", "after") == b"after"


async def test_a_cancelled_lone_reader_leaves_the_reply_order_intact(
    redis_server: RedisServer,
) -> None:
    """Cancelled while it waits for its own reply: the server still runs the command, its
    reply is dropped when it comes, and the next callers get their own."""
    key = f"direct:{uuid.uuid4().hex}"
    async with echomq.connect(redis_server.url) as conn, echomq.connect(redis_server.url) as other:
        await conn.execute("PING")
        with trio.fail_after(10):
            with trio.move_on_after(0.05) as scope:
                await conn.execute("BLPOP", key, 5)
            assert scope.cancelled_caught
            # the next call is in line behind the cancelled BLPOP (still held by the server)
            async with trio.open_nursery() as nursery:
                answers: list[object] = []

                async def echo() -> None:
                    answers.append(await conn.execute("ECHO", "mine"))

                nursery.start_soon(echo)
                await trio.testing.wait_all_tasks_blocked()
                await other.execute("RPUSH", key, "popped-by-the-cancelled-call")
            assert answers == [b"mine"]
            assert await other.execute("LLEN", key) == 0  # the cancelled BLPOP ran
            assert await conn.execute("ECHO", "next") == b"next"


async def test_a_lone_reader_gets_connection_lost_when_the_socket_drops(
    redis_server: RedisServer,
) -> None:
    key = f"direct:{uuid.uuid4().hex}"
    async with echomq.connect(redis_server.url) as conn:
        await conn.execute("PING")
        outcome: list[BaseException] = []

        async def blpop() -> None:
            try:
                await conn.execute("BLPOP", key, 5)
            except ConnectionLost as exc:
                outcome.append(exc)

        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(blpop)
                await trio.testing.wait_all_tasks_blocked()
                conn.drop()
            assert len(outcome) == 1
            assert await conn.execute("ECHO", "again") == b"again"  # a new socket
        assert conn.reconnects == 1


async def test_a_socket_the_server_closed_while_idle_is_replaced_before_the_next_call(
    redis_server: RedisServer,
) -> None:
    """Nobody reads an idle socket; the next call finds it closed (a peek) and reconnects,
    as when the reader task noticed the close: the call is sent on the new socket."""
    async with echomq.connect(redis_server.url) as conn, echomq.connect(redis_server.url) as other:
        await conn.execute("CLIENT", "SETNAME", "idle-victim")
        killed = await other.execute("CLIENT", "KILL", "SKIPME", "yes", "TYPE", "normal", "ID",
                                     await conn.execute("CLIENT", "ID"))  # fmt: skip
        assert killed == 1

        async def closed() -> bool:
            info = await other.execute("CLIENT", "LIST")
            return b"name=idle-victim" not in info

        await until(closed)
        with trio.fail_after(5):
            assert await conn.execute("ECHO", "still here") == b"still here"
        assert conn.reconnects == 1
