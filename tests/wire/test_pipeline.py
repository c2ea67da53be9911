"""Connection.execute_pipeline: several commands, one write, every reply to one caller."""

from __future__ import annotations

import trio

import echomq
from _waits import blocked
from echomq.errors import ServerError


async def test_replies_in_order_with_errors_as_values(conn: echomq.Connection, queue: str) -> None:
    """Each command's reply comes back in its place; an error reply is a value, not raised."""
    key = f"{queue}:k"
    replies = await conn.execute_pipeline(
        [("SET", key, "1"), ("GET", key), ("NOSUCHCOMMAND",), ("INCR", key)]
    )
    assert replies[:2] == [b"OK", b"1"]
    assert isinstance(replies[2], ServerError) and "unknown command" in str(replies[2])
    assert replies[3] == 2
    assert await conn.execute_pipeline([]) == []


async def test_pipelines_and_single_calls_interleave(conn: echomq.Connection) -> None:
    """Hundreds of concurrent pipelines and single commands each get their own replies."""

    async def one(i: int) -> None:
        assert await conn.execute_pipeline([("ECHO", str(i)), ("ECHO", f"{i}b")]) == [
            str(i).encode(),
            f"{i}b".encode(),
        ]
        assert await conn.execute("ECHO", f"{i}c") == f"{i}c".encode()

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            for i in range(300):
                nursery.start_soon(one, i)


async def test_a_command_behind_blpop_runs_when_it_unblocks(
    conn: echomq.Connection, redis_url: str, queue: str
) -> None:
    """INCR queued behind a BLPOP is run by the server only once the BLPOP is served."""
    wake, counter = f"{queue}:wake", f"{queue}:n"
    got: list[list[object]] = []
    name = f"blpop-{queue}"
    async with echomq.connect(redis_url, client_name=name) as blocking:

        async def wait() -> None:
            got.append(await blocking.execute_pipeline([("BLPOP", wake, 5), ("INCR", counter)]))

        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait)
                await blocked(conn, name, wake)
                assert await conn.execute("GET", counter) is None  # still queued behind
                await conn.execute("RPUSH", wake, "token")
    assert got == [[[wake.encode(), b"token"], 1]]


async def test_a_command_head_packs_the_same_bytes_and_runs(conn: echomq.Connection) -> None:
    """A ``CommandHead`` and a call's tail are the bytes ``pack`` makes of every argument
    (str, bytes and int heads; empty, binary and long tails), and the server runs them."""
    from echomq._wire.connection import CommandHead, pack

    head = ("RPUSH", "emq:{head}:list")
    kept = CommandHead(head, 3)
    for tail in ((b"a", b"", b"\r\n\x00"), (b"x" * 70_000, "é".encode(), b"1")):
        assert kept.pack(*tail) == pack((*head, *tail))
    assert CommandHead(("EVALSHA", "f" * 40, 1, 2.5), 1).pack(b"z") == pack(
        ("EVALSHA", "f" * 40, 1, 2.5, b"z")
    )
    if type(conn) is echomq.Connection:  # (a cluster routes by the command's arguments)
        await conn.execute("DEL", "emq:{head}:list")
        assert await conn.execute_packed(kept.pack(b"a", b"", b"b")) == 3
        assert await conn.execute("LRANGE", "emq:{head}:list", 0, -1) == [b"a", b"", b"b"]
        await conn.execute("DEL", "emq:{head}:list")
