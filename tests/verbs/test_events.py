"""Lifecycle events: JSON objects on emq:{q}:events, one per transition."""

from __future__ import annotations

import json
from typing import Any

import trio

import echomq
from _waits import due
from echomq import jobs
from echomq._scripts.keyspace import Keyspace
from echomq._wire.dial import open_pubsub
from echomq._wire.pubsub import PubSub

from ._support import eventually


async def _take(ps: PubSub, n: int) -> list[dict[str, Any]]:
    with trio.fail_after(2):
        return [json.loads((await ps.receive()).data) for _ in range(n)]


async def test_lifecycle_events_are_published_as_json(
    conn: echomq.Connection, queue: str, ks: Keyspace, redis_url: str
) -> None:
    """enqueued, active, completed, retrying and dead arrive in order with their fields."""
    async with open_pubsub(redis_url) as ps:
        await ps.subscribe(ks.events)
        ok = await jobs.enqueue(conn, queue, b"x", job_id="ok-1")
        [held] = await jobs.claim(conn, queue, 1_000)
        await jobs.complete(conn, queue, ok, held.token, b"r")
        assert await _take(ps, 3) == [
            {"event": "enqueued", "job": "ok-1"},
            {"event": "active", "job": "ok-1", "token": 1},
            {"event": "completed", "job": "ok-1"},
        ]

        bad = await jobs.enqueue(conn, queue, b"x", job_id="bad-1", max_attempts=2)
        [held] = await jobs.claim(conn, queue, 1_000)
        await jobs.fail(conn, queue, bad, held.token, 'quote " and \n newline', retry_delay_ms=1)
        await due(conn, queue, bad)
        [held] = await jobs.claim(conn, queue, 1_000)
        await jobs.fail(conn, queue, bad, held.token, "second")
        got = await _take(ps, 6)
    assert got == [
        {"event": "enqueued", "job": "bad-1"},
        {"event": "active", "job": "bad-1", "token": 1},
        {"event": "retrying", "job": "bad-1", "error": 'quote " and \n newline', "delay_ms": 1},
        {"event": "promoted", "job": "bad-1"},
        {"event": "active", "job": "bad-1", "token": 2},
        {"event": "dead", "job": "bad-1", "error": "second"},
    ]


async def test_scheduled_recovered_and_released_events(
    conn: echomq.Connection, queue: str, ks: Keyspace, redis_url: str
) -> None:
    """A delayed enqueue says scheduled; reap says recovered; release says released."""
    async with open_pubsub(redis_url) as ps:
        await ps.subscribe(ks.events)
        await jobs.enqueue(conn, queue, b"", job_id="later", delay_ms=60_000)
        await jobs.enqueue(conn, queue, b"", job_id="now")
        [held] = await jobs.claim(conn, queue, 1)

        async def reaped() -> list[str]:
            return await jobs.reap(conn, queue)

        await eventually(reaped)
        [held] = await jobs.claim(conn, queue, 60_000)
        await jobs.release(conn, queue, [(held.id, held.token)])
        got = await _take(ps, 6)
    assert [(e["event"], e["job"]) for e in got] == [
        ("scheduled", "later"),
        ("enqueued", "now"),
        ("active", "now"),
        ("recovered", "now"),
        ("active", "now"),
        ("released", "now"),
    ]
