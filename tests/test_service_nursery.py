"""An error raised inside ``async with connect()/open_pubsub()/queue.open()`` leaves as itself."""

from __future__ import annotations

import pytest
import trio

import echomq
from echomq import errors, jobs
from echomq._wire.dial import open_pubsub


async def test_connect_block_error_is_not_grouped(redis_url: str, queue: str) -> None:
    """A refusal inside the connect block is caught by its own type outside it."""
    with pytest.raises(errors.JobGone):
        async with echomq.connect(redis_url) as conn:
            await jobs.extend_lock(conn, queue, "missing", 1, 1000)


async def test_pubsub_block_error_is_not_grouped(redis_url: str) -> None:
    """A plain error inside open_pubsub leaves as itself."""
    with pytest.raises(KeyError):
        async with open_pubsub(redis_url, "c"):
            raise KeyError("x")


async def test_queue_open_error_is_not_grouped(redis_url: str, queue: str) -> None:
    """A verb refusal inside queue.open() leaves as itself, and the queue closes."""
    q = echomq.Queue(queue, url=redis_url)
    with pytest.raises(errors.InvalidKey):
        async with q.open():
            await jobs.get_job(q.connection, queue, "bad id")
    with pytest.raises(RuntimeError):
        q.connection  # noqa: B018 - closed again


async def test_cancellation_passes_through(redis_url: str) -> None:
    """A cancelled block is cancelled, not turned into an error."""
    with trio.move_on_after(0.05) as scope:
        async with echomq.connect(redis_url) as conn:
            await conn.execute("PING")
            await trio.sleep_forever()
    assert scope.cancelled_caught
