"""complete and fail: fenced like extend, complete idempotent, retries then dead (the
retention of finished rows: test_retention.py)."""

from __future__ import annotations

import pytest

import echomq
from echomq import jobs
from echomq._scripts.keyspace import Keyspace
from echomq.errors import JobGone, NotActive, StaleToken

from ._support import claim_one, eventually, field, lapse, server_now_ms, snapshot


async def test_complete_settles_the_job(conn: echomq.Connection, queue: str, ks: Keyspace) -> None:
    """complete: active -> completed with the result, timed, counted, out of active."""
    job_id = await jobs.enqueue(conn, queue, b"x")
    held = await claim_one(conn, queue)
    before = await server_now_ms(conn)
    await jobs.complete(conn, queue, job_id, held.token, b"the result")
    info = await jobs.get_job(conn, queue, job_id)
    assert info is not None
    assert info.state is echomq.JobState.COMPLETED
    assert info.result == b"the result"
    assert info.finished_at is not None and info.finished_at >= before
    assert await conn.execute("ZSCORE", ks.active, job_id) is None
    # the index is scored by when the row's retention ends (24 h by default)
    ends = float(await conn.execute("ZSCORE", ks.completed, job_id))
    assert ends == info.finished_at + 86_400_000
    assert await conn.execute("HGET", ks.metrics_completed, "count") == b"1"


async def test_complete_again_with_same_token_is_ok_and_changes_nothing(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A repeat after a lost reply answers ok; the row, sets and metrics stay as they were."""
    job_id = await jobs.enqueue(conn, queue, b"x")
    held = await claim_one(conn, queue)
    await jobs.complete(conn, queue, job_id, held.token, b"first")
    before = await snapshot(conn, ks)
    await jobs.complete(conn, queue, job_id, held.token, b"second")
    assert await snapshot(conn, ks) == before
    assert await field(conn, ks, job_id, "result") == b"first"


async def _refusals(conn: echomq.Connection, queue: str, ks: Keyspace) -> dict[str, object]:
    """A gone id, a stale holder (reclaimed), and a reaped holder: (id, token) each."""
    ids = await jobs.enqueue_many(conn, queue, [jobs.NewJob(payload=b"") for _ in range(2)])
    first = {c.id: c for c in await jobs.claim(conn, queue, 20, count=2)}
    await lapse(conn, ks, *ids)
    assert sorted(await jobs.reap(conn, queue)) == sorted(ids)
    [again] = await jobs.claim(conn, queue, 60_000)  # claimed anew: the first token is stale
    stale_id = again.id
    [reaped_id] = set(ids) - {stale_id}  # reaped and still pending: its token matches
    return {
        "gone": ("never-enqueued", 1, JobGone),
        "stale": (stale_id, first[stale_id].token, StaleToken),
        "not_active": (reaped_id, first[reaped_id].token, NotActive),
    }


@pytest.mark.parametrize("case", ["gone", "stale", "not_active"])
async def test_complete_is_fenced(
    conn: echomq.Connection, queue: str, ks: Keyspace, case: str
) -> None:
    """complete refuses a missing row, a stale token, and a lease that was collected."""
    job_id, token, error = (await _refusals(conn, queue, ks))[case]  # type: ignore[misc]
    before = await snapshot(conn, ks)
    with pytest.raises(error):
        await jobs.complete(conn, queue, job_id, token, b"late")
    assert await snapshot(conn, ks) == before


@pytest.mark.parametrize("case", ["gone", "stale", "not_active"])
async def test_fail_is_fenced(conn: echomq.Connection, queue: str, ks: Keyspace, case: str) -> None:
    """fail refuses a missing row, a stale token, and a lease that was collected."""
    job_id, token, error = (await _refusals(conn, queue, ks))[case]  # type: ignore[misc]
    before = await snapshot(conn, ks)
    with pytest.raises(error):
        await jobs.fail(conn, queue, job_id, token, "late")
    assert await snapshot(conn, ks) == before


async def test_complete_of_a_stale_holder_after_completion_is_stale(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """Idempotency is for the same token only: an older holder is still refused."""
    job_id = await jobs.enqueue(conn, queue, b"x")
    old = await claim_one(conn, queue, lease_ms=20)
    await lapse(conn, ks, job_id)
    await jobs.reap(conn, queue)
    new = await claim_one(conn, queue)
    await jobs.complete(conn, queue, job_id, new.token, b"new")
    before = await snapshot(conn, ks)
    with pytest.raises(StaleToken):
        await jobs.complete(conn, queue, job_id, old.token, b"old")
    assert await snapshot(conn, ks) == before


async def test_fail_with_delay_schedules_a_retry(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A retry with a delay waits in the schedule set, then is claimable again."""
    job_id = await jobs.enqueue(conn, queue, b"x", max_attempts=3)
    held = await claim_one(conn, queue)
    await conn.execute("DEL", ks.wake)  # the enqueue's token
    before = await server_now_ms(conn)
    assert await jobs.fail(conn, queue, job_id, held.token, "boom", retry_delay_ms=40) == "retrying"
    info = await jobs.get_job(conn, queue, job_id)
    assert info is not None
    assert info.state is echomq.JobState.SCHEDULED
    assert (info.failures, info.last_error) == (1, "boom")
    assert info.run_at is not None and info.run_at >= before + 40
    assert float(await conn.execute("ZSCORE", ks.schedule, job_id)) == info.run_at
    assert await conn.execute("ZSCORE", ks.active, job_id) is None
    assert await conn.execute("EXISTS", ks.wake) == 0  # nothing claimable yet
    again = await eventually(lambda: jobs.claim(conn, queue, 1_000))
    assert (again[0].id, again[0].token, again[0].failures) == (job_id, 2, 1)


async def test_fail_without_delay_goes_back_to_pending_and_wakes(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A retry without delay is pending at once and pushes a wake token."""
    job_id = await jobs.enqueue(conn, queue, b"x", max_attempts=2)
    held = await claim_one(conn, queue)
    await conn.execute("DEL", ks.wake)
    assert await jobs.fail(conn, queue, job_id, held.token, "boom") == "retrying"
    assert await field(conn, ks, job_id, "state") == b"pending"
    assert await conn.execute("ZSCORE", ks.pending, job_id) is not None
    assert await conn.execute("LLEN", ks.wake) == 1


async def test_retries_then_dead_at_max_attempts(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """Each failure counts; at max_attempts the job is dead with the last error and metrics."""
    job_id = await jobs.enqueue(conn, queue, b"x", max_attempts=3)
    outcomes = []
    for n in range(3):
        held = await claim_one(conn, queue)
        outcomes.append(await jobs.fail(conn, queue, job_id, held.token, f"error {n}"))
    assert outcomes == ["retrying", "retrying", "dead"]
    info = await jobs.get_job(conn, queue, job_id)
    assert info is not None
    assert info.state is echomq.JobState.DEAD
    assert (info.failures, info.token, info.last_error) == (3, 3, "error 2")
    assert await conn.execute("ZSCORE", ks.dead, job_id) is not None
    assert await conn.execute("ZCARD", ks.pending) == 0
    assert await conn.execute("HGET", ks.metrics_dead, "count") == b"1"


async def test_fail_with_dead_flag_dead_letters_at_once(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """dead=True dead-letters whatever attempts remain."""
    job_id = await jobs.enqueue(conn, queue, b"x", max_attempts=10)
    held = await claim_one(conn, queue)
    assert await jobs.fail(conn, queue, job_id, held.token, "fatal", dead=True) == "dead"
    assert await field(conn, ks, job_id, "state") == b"dead"
    assert await field(conn, ks, job_id, "failures") == b"1"
    assert await field(conn, ks, job_id, "last_error") == b"fatal"
