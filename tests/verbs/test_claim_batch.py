"""claim_batch: the claim's jobs plus how long until the next scheduled job is due."""

from __future__ import annotations

import echomq
from echomq import admin, jobs


async def test_nothing_scheduled_answers_none(conn: echomq.Connection, queue: str) -> None:
    """An under-filled claim with an empty schedule answers next_due_ms None."""
    await jobs.enqueue(conn, queue, b"a")
    batch = await jobs.claim_batch(conn, queue, 1_000, count=5)
    assert [c.payload for c in batch.jobs] == [b"a"]
    assert batch.next_due_ms is None


async def test_next_due_is_the_earliest_scheduled_job(conn: echomq.Connection, queue: str) -> None:
    """Under-filled: the delay until the earliest scheduled job, on the server clock."""
    await jobs.enqueue(conn, queue, b"late", delay_ms=60_000)
    await jobs.enqueue(conn, queue, b"soon", delay_ms=5_000)
    batch = await jobs.claim_batch(conn, queue, 1_000, count=1)
    assert batch.jobs == []
    assert batch.next_due_ms is not None and 4_000 < batch.next_due_ms <= 5_000


async def test_full_batch_answers_none(conn: echomq.Connection, queue: str) -> None:
    """A claim that took all it asked for does not look at the schedule."""
    await jobs.enqueue(conn, queue, b"a")
    await jobs.enqueue(conn, queue, b"b", delay_ms=5_000)
    batch = await jobs.claim_batch(conn, queue, 1_000, count=1)
    assert len(batch.jobs) == 1
    assert batch.next_due_ms is None


async def test_paused_answers_nothing(conn: echomq.Connection, queue: str) -> None:
    """A paused queue answers no jobs and no due time, and claim() agrees."""
    await jobs.enqueue(conn, queue, b"a", delay_ms=5_000)
    await admin.pause(conn, queue)
    batch = await jobs.claim_batch(conn, queue, 1_000, count=3)
    assert batch.jobs == [] and batch.next_due_ms is None
    assert await jobs.claim(conn, queue, 1_000, count=3) == []
