"""A Redis outage is not a blocked event loop (``_worker/watchdog.py``, rule 5).

The watchdog's beat may wait seconds on a Redis that does not answer (SIGSTOPped here);
the probe of the worker's loop is timed when it is sent, after the beat, so an idle worker
is never reported blocked meanwhile: its statistics count a Redis stall instead, and the
beats after the outage say how long it lasted (``echomq workers``, ``explain``, the
dashboard show "Redis unreachable"). A job that really blocks the loop during an outage
is still a block.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import AsyncIterator

import pytest
import trio

import echomq
from echomq import admin, jobs
from echomq.cli import explain_text
from echomq.dashboard import state
from echomq.testing import RedisServer, freeze_redis, wait_running

from ._runtime import serving, until

pytestmark = pytest.mark.single_node("freezes a private server of its own")

FREEZE = 4.0  # seconds Redis answers nothing: twice the watchdog's call timeout


@pytest.fixture
async def server() -> AsyncIterator[RedisServer]:
    server = RedisServer()
    await trio.to_thread.run_sync(server.start)
    try:
        yield server
    finally:
        await trio.to_thread.run_sync(server.stop)


def messages(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


async def test_an_idle_worker_is_never_blocked_while_redis_is_frozen_a_sleeping_job_is(
    server: RedisServer, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: "event loop blocked for 2.1 s in task (the event loop itself)" for a worker
    whose loop only waited on Redis, and its record said blocked. After: no block, one
    stall counted, and the records after say "Redis unreachable"; a job's time.sleep
    during a second freeze is still logged as a block, in that task."""
    caplog.set_level(logging.INFO, logger="echomq.worker")
    q = echomq.Queue(queue, url=server.url)
    go, block = trio.Event(), trio.Event()

    @q.task(name="waits")
    async def waits() -> str:
        await go.wait()  # the loop is free while it waits
        return "done"

    @q.task(name="sleeps")
    async def sleeps() -> None:
        await block.wait()
        time.sleep(1.5)  # blocks the event loop  # noqa: ASYNC251 - the point of the test

    worker = echomq.Worker(q, heartbeat=0.1, block_threshold=0.3)
    with trio.fail_after(60):
        async with q.open(), serving(worker):
            handle = await waits.delay()
            await wait_running(handle)
            with freeze_redis(server):
                await trio.sleep(FREEZE)
                during = worker.statistics()
            conn = q.connection

            async def outage_on_record() -> bool:
                [w] = (await admin.list_workers(conn, queue)).workers
                return w.unreachable_ms is not None and w.unreachable_until_ms is not None

            await until(outage_on_record, 10)
            found = await admin.list_workers(conn, queue)
            summary = explain_text.summary(await jobs.explain(conn, queue, handle.id))
            cli = await trio.run_process(
                [sys.executable, "-m", "echomq", "workers", queue, "--url", server.url, "--json"],
                capture_stdout=True,
            )
            after = worker.statistics()
            go.set()
            assert await handle.result(timeout=10) == "done"
            assert messages(caplog, "event loop blocked") == []

            # a real block during an outage: still a block, named
            slow = await sleeps.delay()
            await wait_running(slow)
            with freeze_redis(server):
                block.set()
                await until(lambda: worker.statistics().blocks >= 1, 10)
            await slow.result(timeout=10)
    [record] = found.workers
    assert during.blocks == 0 and during.redis_unreachable and during.redis_stalls == 1
    assert after.blocks == 0 and not after.redis_unreachable
    assert not record.blocked and record.alive
    assert record.unreachable_ms is not None and record.unreachable_ms >= 0.5 * FREEZE * 1000
    assert "Redis was unreachable from it for " in summary and "blocked" not in summary
    [listed] = json.loads(cli.stdout)
    assert listed["status"].startswith("running (Redis unreachable from it for "), listed
    assert state._worker(record).status == "running"
    assert len(messages(caplog, "watchdog: Redis unreachable")) >= 1
    assert len(messages(caplog, "watchdog: Redis answered again after")) >= 1
    [block] = messages(caplog, "event loop blocked")
    assert "in task sleeps" in block
