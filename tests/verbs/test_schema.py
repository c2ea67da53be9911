"""What a queue is, and its layout's version: ``emq:{q}:meta`` with ``schema_version``,
written by the scripts that may create a queue (enqueue, pause) and checked by every
worker at start (``admin.ensure_schema``)."""

from __future__ import annotations

import pytest
import trio

import echomq
from echomq import admin, jobs
from echomq._scripts.calls import SCHEMA_VERSION
from echomq._scripts.keyspace import Keyspace
from echomq.errors import QueueNotFound, SchemaMismatch

from ._support import snapshot


async def test_enqueue_marks_the_queue_even_with_only_a_delayed_job(
    conn: echomq.Connection, queue: str
) -> None:
    ks = Keyspace(queue)
    await jobs.enqueue(conn, queue, b"x", delay_ms=60_000)
    assert await conn.execute("HGET", ks.meta, "schema_version") == str(SCHEMA_VERSION).encode()
    assert queue in await admin.list_queues(conn)


async def test_pause_creates_no_queue(conn: echomq.Connection, queue: str) -> None:
    """An operator's verb never makes a queue: pause of a missing one is refused by its
    script, which writes nothing; once the queue exists, pause keeps its version."""
    with pytest.raises(QueueNotFound):
        await admin.pause(conn, queue)
    assert queue not in await admin.list_queues(conn)
    assert await admin.ensure_schema(conn, queue) == SCHEMA_VERSION
    await admin.pause(conn, queue)
    assert await admin.ensure_schema(conn, queue) == SCHEMA_VERSION


async def test_ensure_schema_writes_an_absent_version_and_keeps_ours(
    conn: echomq.Connection, queue: str
) -> None:
    ks = Keyspace(queue)
    await conn.execute("HSET", ks.meta, "seq", "3")  # a queue a 0.1 producer made
    assert await admin.ensure_schema(conn, queue) == SCHEMA_VERSION
    assert await conn.execute("HGET", ks.meta, "schema_version") == str(SCHEMA_VERSION).encode()
    assert await admin.ensure_schema(conn, queue) == SCHEMA_VERSION


@pytest.mark.parametrize(
    ("stored", "says"),
    [(str(SCHEMA_VERSION + 1), "upgrade echomq"), ("0", "migrate"), ("garbage", "migrate")],
)
async def test_another_version_is_refused_and_nothing_written(
    conn: echomq.Connection, queue: str, stored: str, says: str
) -> None:
    ks = Keyspace(queue)
    await conn.execute("HSET", ks.meta, "schema_version", stored)
    before = await snapshot(conn, ks)
    with pytest.raises(SchemaMismatch, match=says) as refused:
        await admin.ensure_schema(conn, queue)
    assert refused.value.queue == queue
    assert await snapshot(conn, ks) == before


async def test_a_worker_refuses_a_queue_of_a_newer_layout(redis_url: str, queue: str) -> None:
    """At start, before it claims anything; the job stays pending."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task
    async def noop() -> None:
        return None

    async with echomq.connect(redis_url) as conn:
        job_id = await jobs.enqueue(conn, queue, b'{"task":"x","args":[],"kwargs":{}}')
        await conn.execute("HSET", Keyspace(queue).meta, "schema_version", SCHEMA_VERSION + 1)
        with trio.fail_after(10), pytest.raises(SchemaMismatch, match="newer"):
            try:
                await echomq.Worker(q).serve()
            except BaseExceptionGroup as group:
                raise group.exceptions[0] from None
        info = await jobs.get_job(conn, queue, job_id)
        assert info is not None and info.state == "pending"
