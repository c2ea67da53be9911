"""The hot scripts' per-job events (enqueue, claim, complete_many) go out only while the
queue's events channel has a listener (``include/events.lua``): a subscriber of the
channel, or any pattern subscriber; on a cluster, a sharded subscriber of the channel.
Pub/sub keeps nothing, so the events nobody listens to are the ones nobody could see."""

from __future__ import annotations

import pytest
import trio

import echomq
from echomq import jobs
from echomq._scripts.keyspace import Keyspace
from echomq._wire.dial import open_pubsub
from echomq.events import open_event_feed

N = 3


async def _cycle(conn: echomq.Connection, queue: str) -> list[str]:
    """N jobs enqueued, claimed and completed: 3 events each."""
    ids = await jobs.enqueue_many(conn, queue, [jobs.NewJob(payload=b"x") for _ in range(N)])
    held = await jobs.claim(conn, queue, 60_000, count=N)
    assert sorted(c.id for c in held) == sorted(ids)
    await jobs.complete_many(conn, queue, [(c.id, c.token, b"r") for c in held])
    return ids


def _expected(ids: list[str]) -> list[tuple[str, str]]:
    return [(e, i) for e in ("enqueued", "active", "completed") for i in ids]


async def _publishes(conn: echomq.Connection) -> int:
    """PUBLISH calls the server ran so far (inside scripts too)."""
    info = await conn.execute("INFO", "commandstats")
    text = info.decode() if isinstance(info, bytes) else str(info)
    for line in text.splitlines():
        if line.startswith("cmdstat_publish:"):
            return int(line.split("calls=", 1)[1].split(",", 1)[0])
    return 0


@pytest.mark.single_node("counts the one server's PUBLISH calls")
async def test_with_no_listener_the_scripts_publish_nothing(
    conn: echomq.Connection, queue: str
) -> None:
    before = await _publishes(conn)
    await _cycle(conn, queue)
    assert await _publishes(conn) == before


async def test_a_subscriber_gets_every_event(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """The queue's event feed (SUBSCRIBE; SSUBSCRIBE on a cluster) hears all of them."""
    with trio.fail_after(10):
        async with open_event_feed(redis_url, queue) as feed:
            with feed.listen() as everything:
                ids = await _cycle(conn, queue)
                got = [await everything.receive() for _ in range(3 * N)]
    assert [(e.event, e.job) for e in got] == _expected(ids)


@pytest.mark.single_node("pattern subscriptions do not exist for sharded channels")
async def test_a_pattern_subscriber_is_a_listener(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    channel = Keyspace(queue).events
    with trio.fail_after(10):
        async with open_pubsub(redis_url) as ps:
            await ps.psubscribe(channel[:-1] + "*")
            ids = await _cycle(conn, queue)
            got = [await ps.receive() for _ in range(3 * N)]
    assert {m.channel for m in got} == {channel}
    assert len(got) == 3 * N and all(m.pattern for m in got)
    assert sum(m.data.count(i.encode()) for m in got for i in ids) == 3 * N
