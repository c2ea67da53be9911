"""jobs.explain: why a job is (not) running, for every state; its facts and summary are
worded by the CLI (echomq.cli.explain_text)."""

from __future__ import annotations

import pytest

import echomq
from _waits import clock_past
from echomq import admin, jobs
from echomq._scripts.keyspace import Keyspace
from echomq.cli.explain_text import facts, summary
from echomq.errors import JobGone


async def test_explain_pending_gives_position_and_gate(conn: echomq.Connection, queue: str) -> None:
    """A pending job: its position in pending, and the pause gate when set."""
    ids = await jobs.enqueue_many(conn, queue, [jobs.NewJob(payload=b"p") for _ in range(3)])
    e = await jobs.explain(conn, queue, ids[1])
    assert e.state == "pending" and e.sets == ("pending",)
    assert (e.position, e.pending_count, e.paused) == (1, 3, False)
    assert "position 2 of 3" in summary(e) and "ready" in summary(e)
    await admin.pause(conn, queue)
    e = await jobs.explain(conn, queue, ids[1])
    assert e.paused and "paused" in summary(e)
    assert ("queue", "paused") in facts(e)


async def test_explain_active_gives_lease_epoch_and_token(
    conn: echomq.Connection, queue: str
) -> None:
    """An active job: lease deadline ahead, epoch of the current run, the token."""
    job_id = await jobs.enqueue(conn, queue, b"p")
    [c] = await jobs.claim(conn, queue, 10_000)
    e = await jobs.explain(conn, queue, job_id)
    assert e.state == "active" and e.token == c.token == 1
    assert e.lease_remaining_ms is not None and 0 < e.lease_remaining_ms <= 10_000
    assert e.epoch_current is True
    assert "running" in summary(e) and "token 1" in summary(e)
    labels = dict(facts(e))
    assert "lease deadline" in labels and labels["token"] == "1"


async def test_explain_expired_lease_and_previous_run(conn: echomq.Connection, queue: str) -> None:
    """An expired lease says so; a lease from another run says the sweep recovers it."""
    job_id = await jobs.enqueue(conn, queue, b"p")
    [held] = await jobs.claim(conn, queue, 20)
    await clock_past(conn, float(await conn.execute("ZSCORE", Keyspace(queue).active, held.id)))
    e = await jobs.explain(conn, queue, job_id)
    assert e.lease_remaining_ms is not None and e.lease_remaining_ms < 0
    assert "lease expired" in summary(e)
    await conn.execute("HSET", Keyspace(queue).job(job_id), "lease_epoch", "0" * 40)
    e = await jobs.explain(conn, queue, job_id)
    assert e.epoch_current is False and "before the server's last restart" in summary(e)


async def test_explain_scheduled_retry_gives_next_run(conn: echomq.Connection, queue: str) -> None:
    """A job backing off after a failure: the next run time and the failure count."""
    job_id = await jobs.enqueue(conn, queue, b"p", max_attempts=3)
    [c] = await jobs.claim(conn, queue, 1000)
    await jobs.fail(conn, queue, job_id, c.token, "flaky", retry_delay_ms=30_000)
    e = await jobs.explain(conn, queue, job_id)
    assert e.state == "scheduled" and e.run_at_ms is not None
    assert 0 < e.run_at_ms - e.now_ms <= 30_000
    assert "retry after failure 1 of 3" in summary(e) and "runs in" in summary(e)
    assert dict(facts(e))["last error"] == "flaky"


async def test_explain_dead_and_completed(conn: echomq.Connection, queue: str) -> None:
    """A dead job gives its error and the way out; a completed one says it is done."""
    a, b = await jobs.enqueue_many(conn, queue, [jobs.NewJob(payload=b"p") for _ in range(2)])
    ca, cb = await jobs.claim(conn, queue, 1000, count=2)
    await jobs.fail(conn, queue, a, ca.token, "boom")
    await jobs.complete(conn, queue, b, cb.token, b"r")
    dead = await jobs.explain(conn, queue, a)
    assert dead.sets == ("dead",) and "boom" in summary(dead) and "reprocess" in summary(dead)
    done = await jobs.explain(conn, queue, b)
    assert done.sets == ("completed",) and summary(done).startswith("completed")


async def test_explain_reports_lock_and_inconsistency(conn: echomq.Connection, queue: str) -> None:
    """A lock key shows as locked; a row whose id is in no set is called out."""
    ks = Keyspace(queue)
    job_id = await jobs.enqueue(conn, queue, b"p")
    await conn.execute("SET", ks.lock(job_id), "1")
    await conn.execute("ZREM", ks.pending, job_id)
    e = await jobs.explain(conn, queue, job_id)
    assert e.locked and e.sets == ()
    assert "in no pending set" in summary(e)
    assert "inconsistent" in dict(facts(e))


async def test_explain_missing_job_is_gone(conn: echomq.Connection, queue: str) -> None:
    """explain of a missing row raises JobGone."""
    with pytest.raises(JobGone):
        await jobs.explain(conn, queue, "ghost")
