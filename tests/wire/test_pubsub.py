"""The pub/sub connection: confirmed subscriptions, delivery, and resubscription after a restart."""

from __future__ import annotations

import trio
import trio.testing

import echomq
from echomq._wire.dial import open_pubsub
from echomq._wire.pubsub import Message, PubSub
from echomq.testing import RedisServer, drop_redis, restart_redis


async def _publish_until_heard(conn: echomq.Connection, channel: str, data: bytes) -> None:
    """Publish until one subscriber is listening (a resubscribe may still be on its way)."""
    while True:
        if await conn.execute("PUBLISH", channel, data) == 1:
            return
        await trio.sleep(0.01)


async def test_message_published_after_subscribe_returns_arrives(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """subscribe returns after the server confirmed: the next PUBLISH reaches the subscriber."""
    async with open_pubsub(redis_url) as ps:
        await ps.subscribe(queue)
        assert await conn.execute("PUBLISH", queue, b"\x00binary\r\n") == 1
        with trio.fail_after(2):
            assert await ps.receive() == Message(queue, b"\x00binary\r\n")


async def test_messages_arrive_in_order_through_async_for(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """``async for`` yields every message in publish order."""
    async with open_pubsub(redis_url, queue) as ps:
        for i in range(100):
            await conn.execute("PUBLISH", queue, str(i))
        got: list[bytes] = []
        with trio.fail_after(2):
            async for message in ps:
                got.append(message.data)
                if len(got) == 100:
                    break
    assert got == [str(i).encode() for i in range(100)]


async def test_pattern_subscription_reports_the_pattern(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """psubscribe delivers matching channels with the pattern that matched."""
    async with open_pubsub(redis_url) as ps:
        await ps.psubscribe(f"{queue}:*")
        await conn.execute("PUBLISH", f"{queue}:a", "hello")
        with trio.fail_after(2):
            assert await ps.receive() == Message(f"{queue}:a", b"hello", pattern=f"{queue}:*")


async def test_concurrent_subscribes_are_all_confirmed(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """Fifty tasks subscribing at once each return confirmed, and every channel delivers."""
    channels = [f"{queue}:{i}" for i in range(50)]
    async with open_pubsub(redis_url) as ps:
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                for channel in channels:
                    nursery.start_soon(ps.subscribe, channel)
            for channel in channels:
                assert await conn.execute("PUBLISH", channel, channel) == 1
            got = {(await ps.receive()).channel for _ in channels}
    assert got == set(channels)


async def test_unsubscribed_channel_no_longer_delivers(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """After unsubscribe the server counts no listener for that channel."""
    async with open_pubsub(redis_url, queue, f"{queue}:other") as ps:
        await ps.unsubscribe(queue)
        with trio.fail_after(2):
            while True:
                if await conn.execute("PUBLISH", queue, "x") == 0:
                    break
                await trio.sleep(0.01)
        assert ps.channels == {f"{queue}:other"}


async def test_pubsub_resubscribes_after_server_restart(own_server: RedisServer) -> None:
    """Kill and restart the server: the PubSub reconnects, resubscribes and receives again."""
    async with open_pubsub(own_server.url, "events") as ps, echomq.connect(own_server.url) as conn:
        assert await conn.execute("PUBLISH", "events", "before") == 1
        with trio.fail_after(2):
            assert (await ps.receive()).data == b"before"

        await restart_redis(own_server)
        with trio.fail_after(10):
            await _publish_until_heard(conn, "events", b"after")
            assert (await ps.receive()).data == b"after"
        assert ps.reconnects >= 1  # (a restart may cost more than one attempt)


async def test_subscribe_during_an_outage_returns_once_resubscribed(
    own_server: RedisServer,
) -> None:
    """A subscribe made while the server is down completes after it is back, and delivers."""
    async with open_pubsub(own_server.url, "first") as ps, echomq.connect(own_server.url) as conn:
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                async with drop_redis(own_server):
                    nursery.start_soon(ps.subscribe, "second")
                    await trio.testing.wait_all_tasks_blocked(cushion=0.02)  # it waits to reconnect
            await _publish_until_heard(conn, "second", b"hello")
            assert await ps.receive() == Message("second", b"hello")


async def test_pubsub_with_password_and_tls(
    tls_server: RedisServer, password_server: RedisServer
) -> None:
    """Pub/sub authenticates (AUTH) and runs over TLS like the command connection."""
    for server in (password_server, tls_server):
        async with open_pubsub(server.url, "secure") as ps, echomq.connect(server.url) as conn:
            assert await conn.execute("PUBLISH", "secure", "ok") == 1
            with trio.fail_after(2):
                assert (await ps.receive()).data == b"ok"


async def test_slow_consumer_drops_newest_messages_and_counts_them(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """A consumer ``buffer`` messages behind loses the overflow; the reader never stalls."""
    async with open_pubsub(redis_url, queue, buffer=5) as ps:
        assert isinstance(ps, PubSub)
        for i in range(8):
            await conn.execute("PUBLISH", queue, str(i))
        with trio.fail_after(2):
            while True:
                if ps.dropped == 3:
                    break
                await trio.sleep(0.01)
        got = [(await ps.receive()).data for _ in range(5)]
    assert got == [str(i).encode() for i in range(5)]
    assert ps.dropped == 3
