"""Decorated schedules come back after Redis lost its data (docs/repeat.md, "Data loss").

A worker registers its ``@queue.task(every=...)`` schedules at start; when Redis loses its
data (a restart without persistence, a FLUSHALL) the repeater notices the missing records
and registers them again, with a WARNING, and the runs resume: no worker restart.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import trio

import echomq
from echomq import repeat
from echomq.testing import RedisServer, restart_redis

from ._runtime import serving, until

pytestmark = pytest.mark.single_node("a private server of its own, restarted or flushed")

EVERY = 0.05


@pytest.fixture
async def server() -> AsyncIterator[RedisServer]:
    server = RedisServer()  # no persistence: a restart comes back empty
    await trio.to_thread.run_sync(server.start)
    try:
        yield server
    finally:
        await trio.to_thread.run_sync(server.stop)


async def flushall(server: RedisServer) -> None:
    async with echomq.connect(server.url) as conn:
        assert await conn.execute("FLUSHALL") == b"OK"


async def restart(server: RedisServer) -> None:
    await restart_redis(server)


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "repeat scheduler: decorated schedule" in r.getMessage()
    ]


@pytest.mark.parametrize("lose", [flushall, restart], ids=["flushall", "restart"])
async def test_decorated_schedules_resume_after_redis_lost_its_data(
    server: RedisServer,
    queue: str,
    caplog: pytest.LogCaptureFixture,
    lose: Callable[[RedisServer], Awaitable[None]],
) -> None:
    """Before: 0 runs after the loss, no log line (the schedules were registered once per
    life of the loop). After: runs resume, one WARNING names the schedule and the cause."""
    caplog.set_level(logging.WARNING, logger="echomq.worker")
    q = echomq.Queue(queue, url=server.url)
    ran: list[str] = []

    @q.task(name="beat", every=EVERY)
    async def beat(job: echomq.Job) -> None:
        ran.append(job.id)

    with trio.fail_after(30):
        async with q.open(), serving(echomq.Worker(q, heartbeat=0.1)) as worker:
            await until(lambda: len(ran) >= 3)
            await lose(server)
            lost_at = len(ran)
            await until(lambda: len(ran) >= lost_at + 3, 15)
            assert worker._repeater is not None and worker._repeater.restored >= 1
            info = await repeat.get(q.connection, queue, "beat")
            assert (info.source, info.schedule.every_ms) == ("task", round(EVERY * 1000))
    [line, *_] = warnings(caplog)
    assert "beat" in line and "gone from Redis" in line
    assert len(ran) == len(set(ran))


async def test_a_paused_queue_and_a_paused_schedule_are_not_a_loss(
    server: RedisServer, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    """No upcoming slot (the schedule paused, then the queue) makes the repeater look at
    once, and it finds nothing missing: no re-registration, no warning, still paused."""
    caplog.set_level(logging.WARNING, logger="echomq.worker")
    q = echomq.Queue(queue, url=server.url)

    @q.task(name="beat", every=EVERY)
    async def beat() -> None: ...

    with trio.fail_after(20):
        async with q.open(), serving(echomq.Worker(q)) as worker:
            repeater = worker._repeater
            assert repeater is not None
            await until(lambda: repeater.passes >= 1)
            await repeat.pause(q.connection, queue, "beat")
            await echomq.admin.pause(q.connection, queue)
            for _ in range(3):  # passes with no upcoming slot, each one checks
                passes = repeater.passes
                repeater.wake()
                await until(lambda: repeater.passes > passes)  # noqa: B023 - awaited here
            assert (await repeat.get(q.connection, queue, "beat")).paused
    assert repeater.restored == 0 and warnings(caplog) == []
