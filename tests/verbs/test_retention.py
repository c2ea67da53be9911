"""What the finishing scripts keep, and for how long (docs/results.md): the completions
entry, the counters, the rows' TTL and their index, the count guard, and the log lines."""

from __future__ import annotations

from typing import Any

import pytest

import echomq
from _waits import clock_past, until
from echomq import admin, jobs
from echomq._model.completion import FinishState, parse_entry
from echomq._scripts.keyspace import Keyspace

from ._support import claim_one, field, server_now_ms

DAY_MS = 86_400_000


async def entries(conn: echomq.Connection, ks: Keyspace) -> list[Any]:
    raw = await conn.execute("XRANGE", ks.completions, "-", "+")
    return [parse_entry(ks.queue, item[0].decode(), item[1]) for item in raw]


async def run(conn: echomq.Connection, queue: str, job: jobs.NewJob, result: bytes = b"r") -> str:
    (job_id,) = await jobs.enqueue_many(conn, queue, [job])
    held = await claim_one(conn, queue)
    assert held.id == job_id
    await jobs.complete(conn, queue, job_id, held.token, result)
    return job_id


async def test_complete_writes_its_entry_counters_and_retention(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """One entry (the contract's fields, the task from the row), a total, a minute counter
    with a TTL, the row's TTL and its index score = when the retention ends."""
    job_id = await run(conn, queue, jobs.NewJob(payload=b"p", task="app.add"), b"42")
    info = await jobs.get_job(conn, queue, job_id)
    assert info is not None and info.finished_at is not None
    (entry,) = await entries(conn, ks)
    assert (entry.id, entry.state, entry.task, entry.result) == (
        job_id, FinishState.COMPLETED, "app.add", b"42",
    )  # fmt: skip
    assert (entry.attempts, entry.failures) == (1, 0)
    assert (entry.created_at, entry.claimed_at, entry.finished_at) == (
        info.created_at, info.claimed_at, info.finished_at,
    )  # fmt: skip
    assert not entry.extra
    assert await conn.execute("HGET", ks.metrics_completed, "count") == b"1"
    bucket = ks.metrics_minute("completed", info.finished_at // 60_000)
    assert await conn.execute("HGET", bucket, "count") == b"1"
    assert 0 < await conn.execute("PTTL", bucket) <= 720 * 60_000 + 120_000
    ttl = await conn.execute("PTTL", ks.job(job_id))
    assert DAY_MS - 60_000 < ttl <= DAY_MS
    assert float(await conn.execute("ZSCORE", ks.completed, job_id)) == info.finished_at + DAY_MS


async def test_a_raw_job_has_no_task_and_a_cancelled_result_finishes_as_cancelled(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """No task field when the row has none; ``cancelled:<reason>`` is the cancelled outcome."""
    job_id = await run(conn, queue, jobs.NewJob(payload=b""), b"cancelled:enough")
    (entry,) = await entries(conn, ks)
    assert (entry.id, entry.state, entry.task, entry.reason, entry.result) == (
        job_id, FinishState.CANCELLED, None, "enough", None,
    )  # fmt: skip
    assert await conn.execute("HGET", ks.metrics_cancelled, "count") == b"1"
    assert await conn.execute("HGET", ks.metrics_completed, "count") is None
    assert await conn.execute("ZSCORE", ks.completed, job_id) is not None  # the row is kept


async def test_dead_and_cancelled_waiting_jobs_have_entries(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """fail to dead: error and failures, the dead TTL (7 days); cancel of a waiting job:
    the row goes, the entry stays with the reason."""
    dead_id, waiting = await jobs.enqueue_many(
        conn, queue, [jobs.NewJob(payload=b"", task="t.d"), jobs.NewJob(payload=b"", priority=-1)]
    )
    held = await claim_one(conn, queue)
    assert await jobs.fail(conn, queue, dead_id, held.token, "boom") == "dead"
    await echomq.cancel.request(conn, queue, waiting, "not needed")
    first, second = await entries(conn, ks)
    assert (first.id, first.state, first.error, first.failures, first.task) == (
        dead_id, FinishState.DEAD, "boom", 1, "t.d",
    )  # fmt: skip
    assert (second.id, second.state, second.reason, second.attempts) == (
        waiting, FinishState.CANCELLED, "not needed", 0,
    )  # fmt: skip
    assert second.claimed_at is None
    ttl = await conn.execute("PTTL", ks.job(dead_id))
    assert 7 * DAY_MS - 60_000 < ttl <= 7 * DAY_MS
    assert await conn.execute("EXISTS", ks.job(waiting)) == 0
    assert await conn.execute("HGET", ks.metrics_failed, "count") == b"1"
    assert await conn.execute("HGET", ks.metrics_cancelled, "count") == b"1"


async def test_remove_job_writes_no_entry(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """Removal is not an outcome: no entry, no counter."""
    job_id = await jobs.enqueue(conn, queue, b"")
    await jobs.remove_job(conn, queue, job_id)
    assert await conn.execute("EXISTS", ks.completions) == 0
    assert await conn.execute("EXISTS", ks.metrics_cancelled) == 0


async def test_a_jobs_own_keep_wins_and_zero_keeps_nothing(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """keep_result on the row beats the queue's; 0 deletes the row (and its logs) at once,
    the entry still carries the result."""
    kept = await run(conn, queue, jobs.NewJob(payload=b"", keep_result_ms=5_000))
    assert 4_000 < await conn.execute("PTTL", ks.job(kept)) <= 5_000
    (gone,) = await jobs.enqueue_many(conn, queue, [jobs.NewJob(payload=b"", keep_result_ms=0)])
    held = await claim_one(conn, queue)
    await jobs.add_log(conn, queue, gone, "a line")
    await jobs.complete(conn, queue, gone, held.token, b"bye")
    assert await conn.execute("EXISTS", ks.job(gone), ks.logs(gone)) == 0
    assert await conn.execute("ZSCORE", ks.completed, gone) is None
    assert (await entries(conn, ks))[-1].result == b"bye"


async def test_queue_settings_apply_and_reset(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """set_retention writes meta; retention() reads it back with the defaults filled; None
    resets a setting."""
    assert await admin.retention(conn, queue) == admin.Retention()
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_retention(conn, queue, keep_result=60, keep_dead=0.5, max_completed=10)
    got = await admin.retention(conn, queue)
    assert (got.keep_result, got.keep_dead, got.max_completed) == (60.0, 0.5, 10)
    assert got.explicit == {"keep_result", "keep_dead", "max_completed"}
    assert await conn.execute("HGET", ks.meta, "schema_version") is not None
    job_id = await run(conn, queue, jobs.NewJob(payload=b""))
    assert 50_000 < await conn.execute("PTTL", ks.job(job_id)) <= 60_000
    await admin.set_retention(conn, queue, keep_result=None)
    assert (await admin.retention(conn, queue)).keep_result == 86_400.0


async def test_expired_index_entries_are_cleaned_by_the_next_finish(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """Redis deletes the row at its TTL; the next completion drops its index entry."""
    old = await run(conn, queue, jobs.NewJob(payload=b"", keep_result_ms=20))
    ends = float(await conn.execute("ZSCORE", ks.completed, old))
    await clock_past(conn, ends, ks.meta)
    await until(lambda: _gone(conn, ks, old))
    new = await run(conn, queue, jobs.NewJob(payload=b""))
    assert await conn.execute("ZRANGE", ks.completed, 0, -1) == [new.encode()]


async def _gone(conn: echomq.Connection, ks: Keyspace, job_id: str) -> bool:
    return await conn.execute("EXISTS", ks.job(job_id)) == 0


async def test_the_count_guard_deletes_the_rows_closest_to_their_end_and_counts_them(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """Past max_completed, the rows whose retention ends first go (with their logs), and
    metrics:capped counts them; stats reports it."""
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_retention(conn, queue, max_completed=2)
    short = await run(conn, queue, jobs.NewJob(payload=b"", keep_result_ms=60_000))
    await jobs.add_log(conn, queue, short, "line")
    long_a = await run(conn, queue, jobs.NewJob(payload=b""))
    long_b = await run(conn, queue, jobs.NewJob(payload=b""))
    assert await conn.execute("EXISTS", ks.job(short), ks.logs(short)) == 0
    members = await conn.execute("ZRANGE", ks.completed, 0, -1)
    assert sorted(members) == sorted([long_a.encode(), long_b.encode()])
    stats = await admin.stats(conn, queue)
    assert (stats.capped.completed, stats.completed) == (1, 2)


async def test_the_count_guard_never_deletes_a_row_that_is_no_longer_completed(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """An index member whose row is live again (removed, re-enqueued) survives the guard."""
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_retention(conn, queue, max_completed=1)
    reused = await run(conn, queue, jobs.NewJob(payload=b""))
    await conn.execute("DEL", ks.job(reused))  # an operator removed the row, not the member
    await jobs.enqueue(conn, queue, b"again", job_id=reused)
    held = await claim_one(conn, queue)
    assert held.id == reused
    await run(conn, queue, jobs.NewJob(payload=b""))
    assert await field(conn, ks, reused, "state") == b"active"
    assert (await admin.stats(conn, queue)).capped.completed == 0


async def test_rows_written_by_0_1_get_their_retention_from_finished_at(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A 0.1 row (no TTL, scored by its finish time): at the next finish it ends keep after
    it finished: deleted when that is past, else given the TTL and re-scored."""
    now = await server_now_ms(conn)
    for job_id, finished_at in (("old", now - 2 * DAY_MS), ("recent", now - 1_000)):
        await conn.execute("HSET", ks.job(job_id), "state", "completed", "finished_at", finished_at)
        await conn.execute("RPUSH", ks.logs(job_id), "line")
        await conn.execute("ZADD", ks.completed, finished_at, job_id)
    await run(conn, queue, jobs.NewJob(payload=b""))
    assert await conn.execute("EXISTS", ks.job("old"), ks.logs("old")) == 0
    assert await conn.execute("ZSCORE", ks.completed, "old") is None
    assert DAY_MS - 60_000 < await conn.execute("PTTL", ks.job("recent")) < DAY_MS
    assert DAY_MS - 60_000 < await conn.execute("PTTL", ks.logs("recent")) < DAY_MS
    score = float(await conn.execute("ZSCORE", ks.completed, "recent"))
    assert score == now - 1_000 + DAY_MS


async def test_reprocess_makes_a_dead_row_live_again(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """The dead TTL goes with reprocess (row and logs)."""
    job_id = await jobs.enqueue(conn, queue, b"")
    await jobs.add_log(conn, queue, job_id, "line")
    held = await claim_one(conn, queue)
    await jobs.fail(conn, queue, job_id, held.token, "boom")
    assert await conn.execute("PTTL", ks.logs(job_id)) > 0
    await jobs.reprocess_job(conn, queue, job_id)
    assert await conn.execute("PTTL", ks.job(job_id)) == -1
    assert await conn.execute("PTTL", ks.logs(job_id)) == -1


async def test_logs_are_capped_by_default_and_end_with_their_job(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """add_log keeps max_log_lines (the queue's, else 1,000); a line added after the job
    finished takes the row's remaining TTL."""
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_retention(conn, queue, max_log_lines=3)
    job_id = await jobs.enqueue(conn, queue, b"")
    counts = [await jobs.add_log(conn, queue, job_id, f"l{i}") for i in range(5)]
    assert counts == [1, 2, 3, 3, 3]
    assert await jobs.get_job_logs(conn, queue, job_id) == ["l2", "l3", "l4"]
    assert await jobs.add_log(conn, queue, job_id, "x", keep=10) == 4  # an explicit keep
    await jobs.remove_job(conn, queue, job_id)
    done = await run(conn, queue, jobs.NewJob(payload=b"", keep_result_ms=50_000), b"")
    await jobs.add_log(conn, queue, done, "after")
    assert 0 < await conn.execute("PTTL", ks.logs(done)) <= 50_000


async def test_the_logs_flag_spares_a_queue_without_logs_its_logs_reads(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A new queue's meta says `logs` 0 (its finishes read no logs key); its first log
    line makes it 1, and from then on a finished job's logs take its TTL. A queue from
    before the flag (no field) is read as 1: its logs still end with their job."""
    await run(conn, queue, jobs.NewJob(payload=b""))
    assert await conn.execute("HGET", ks.meta, "logs") == b"0"
    gone = await run(conn, queue, jobs.NewJob(payload=b"", keep_result_ms=0))
    assert await conn.execute("EXISTS", ks.job(gone)) == 0
    (job_id,) = await jobs.enqueue_many(conn, queue, [jobs.NewJob(payload=b"")])
    await jobs.add_log(conn, queue, job_id, "line")
    assert await conn.execute("HGET", ks.meta, "logs") == b"1"
    held = await claim_one(conn, queue)
    await jobs.complete(conn, queue, job_id, held.token, b"")
    assert 0 < await conn.execute("PTTL", ks.logs(job_id)) <= DAY_MS
    # a queue whose meta predates the flag, with a log list written before it
    await conn.execute("HDEL", ks.meta, "logs")
    (old,) = await jobs.enqueue_many(conn, queue, [jobs.NewJob(payload=b"")])
    await conn.execute("RPUSH", ks.logs(old), "line")
    held = await claim_one(conn, queue)
    await jobs.complete(conn, queue, old, held.token, b"")
    assert 0 < await conn.execute("PTTL", ks.logs(old)) <= DAY_MS
    assert await conn.execute("HGET", ks.meta, "logs") is None
    (dropped,) = await jobs.enqueue_many(conn, queue, [jobs.NewJob(payload=b"", keep_result_ms=0)])
    await conn.execute("RPUSH", ks.logs(dropped), "line")
    held = await claim_one(conn, queue)
    await jobs.complete(conn, queue, dropped, held.token, b"")
    assert await conn.execute("EXISTS", ks.job(dropped), ks.logs(dropped)) == 0


async def test_a_queue_first_written_by_its_settings_has_no_logs_flag(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """The flag is set only on a meta hash that held nothing else when it was marked (a new
    queue): one whose settings were written before any version (a queue from before the
    field) keeps reading every finished job's logs key."""
    await admin.ensure_schema(conn, queue)
    await admin.set_retention(conn, queue, keep_result=60)
    assert await conn.execute("HGET", ks.meta, "logs") == b"0"
    other = Keyspace(queue + "-limited")
    await conn.execute("HSET", other.meta, "rate_max", "1000", "rate_ms", "1000")
    await run(conn, other.queue, jobs.NewJob(payload=b""))
    assert await conn.execute("HGET", other.meta, "logs") is None


@pytest.fixture
async def small_nodes(conn: echomq.Connection, ks: Keyspace) -> Any:
    """Stream nodes of 10 entries, so approximate trimming acts on a short stream."""
    from _waits import _at

    before = (await _at(conn, ks.meta, "CONFIG", "GET", "stream-node-max-entries"))[1]
    await _at(conn, ks.meta, "CONFIG", "SET", "stream-node-max-entries", 10)
    yield
    await _at(conn, ks.meta, "CONFIG", "SET", "stream-node-max-entries", before)


async def test_the_stream_is_trimmed_by_count_and_the_guard_counts(
    conn: echomq.Connection, queue: str, ks: Keyspace, small_nodes: None
) -> None:
    """completions_max (MAXLEN ~): whole nodes go; metrics:capped counts the entries."""
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_retention(conn, queue, completions_max=10)
    for _ in range(40):
        await run(conn, queue, jobs.NewJob(payload=b""))
    length = await conn.execute("XLEN", ks.completions)
    assert 10 <= length < 30
    assert (await admin.stats(conn, queue)).capped.completions == 40 - length


async def test_the_stream_is_trimmed_by_time(
    conn: echomq.Connection, queue: str, ks: Keyspace, small_nodes: None
) -> None:
    """completions_keep (MINID ~): entries older than it go, whole nodes at a time, and
    that is not counted as capped."""
    for _ in range(25):
        await run(conn, queue, jobs.NewJob(payload=b""))
    last = (await conn.execute("XREVRANGE", ks.completions, "+", "-", "COUNT", 1))[0][0]
    await clock_past(conn, int(last.split(b"-")[0]) + 5, ks.meta)
    await admin.set_retention(conn, queue, completions_keep=0.001)
    await run(conn, queue, jobs.NewJob(payload=b""))
    assert await conn.execute("XLEN", ks.completions) <= 10
    assert (await admin.stats(conn, queue)).capped.completions == 0


async def test_stats_counts_by_the_minute(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """stats reads the per-minute counters, not the retained rows."""
    for _ in range(3):
        await run(conn, queue, jobs.NewJob(payload=b"", keep_result_ms=0))
    job_id = await jobs.enqueue(conn, queue, b"")
    held = await claim_one(conn, queue)
    await jobs.fail(conn, queue, job_id, held.token, "x")
    stats = await admin.stats(conn, queue, minutes=5)
    assert stats.completed == 0  # nothing retained...
    assert len(stats.completed_per_minute) == 5
    assert sum(stats.completed_per_minute[-2:]) == 3  # ...but counted (this minute or the last)
    assert sum(stats.dead_per_minute) == 1
    assert stats.completed_last_minute == 3
    assert (stats.completed_total, stats.failed_total, stats.cancelled_total) == (3, 1, 0)
