"""``admin.migrate``: a queue of data layout 1 (the fencing token in the row's ``attempts``,
the dead-letter total in ``metrics:failed``) rewritten to this echomq's layout, a SCAN page
per call, idempotently; producers and workers refuse the queue until it is done."""

from __future__ import annotations

import pytest

import echomq
from echomq import admin, jobs
from echomq._client.waiting import Outcome, row_outcome
from echomq._model.completion import FinishState
from echomq._scripts.calls import SCHEMA_VERSION
from echomq._scripts.keyspace import Keyspace
from echomq.errors import InvalidArgument, QueueNotFound, SchemaMismatch, StaleToken

from ._support import server_now_ms, snapshot


async def old_queue(conn: echomq.Connection, ks: Keyspace, pending: int = 3) -> list[str]:
    """A queue as echomq's layout 1 wrote it, by raw commands: ``pending`` jobs waiting,
    one held (token 1, its lease run out), one completed, one cancelled (stored completed
    with the result ``cancelled:<reason>``), two dead counted; the ids."""
    now = await server_now_ms(conn)
    await conn.execute("HSET", ks.meta, "schema_version", "1", "seq", str(pending))
    ids = [f"p{i}" for i in range(pending)]
    for i, job_id in enumerate(ids):
        await conn.execute(
            "HSET", ks.job(job_id), "state", "pending", "payload", f"job {i}", "attempts", "0",
            "failures", "0", "stalled", "0", "priority", "0", "max_attempts", "1",
            "created_at", str(now),
        )  # fmt: skip
        await conn.execute("ZADD", ks.pending, str(i + 1), job_id)
    await conn.execute(
        "HSET", ks.job("held"), "state", "active", "payload", "held", "attempts", "1",
        "failures", "0", "stalled", "0", "priority", "0", "max_attempts", "1",
        "created_at", str(now - 5000), "claimed_at", str(now - 5000), "lease_epoch", "x",
    )  # fmt: skip
    await conn.execute("ZADD", ks.active, str(now - 1000), "held")
    await conn.execute(
        "HSET", ks.job("done"), "state", "completed", "payload", "d", "attempts", "1",
        "failures", "0", "stalled", "0", "result", "R", "finished_at", str(now),
    )  # fmt: skip
    await conn.execute("ZADD", ks.completed, str(now + 60_000), "done")
    await conn.execute("RPUSH", ks.job("done") + ":logs", "a log line")
    await conn.execute(
        "HSET", ks.job("stopped"), "state", "completed", "payload", "s", "attempts", "1",
        "failures", "0", "stalled", "0", "result", "cancelled:bye", "finished_at", str(now),
    )  # fmt: skip
    await conn.execute("ZADD", ks.completed, str(now + 70_000), "stopped")
    await conn.execute("HSET", ks.base + "metrics:failed", "count", "2")
    return [*ids, "held", "done", "stopped"]


async def test_a_queue_of_layout_1_is_refused_by_producers_until_migrated(
    conn: echomq.Connection, queue: str
) -> None:
    ks = Keyspace(queue)
    await old_queue(conn, ks)
    before = await snapshot(conn, ks)
    with pytest.raises(SchemaMismatch, match="echomq migrate"):
        await jobs.enqueue(conn, queue, b"new")
    with pytest.raises(SchemaMismatch, match="older"):
        await admin.ensure_schema(conn, queue)
    assert await snapshot(conn, ks) == before  # nothing written


async def test_migrate_rewrites_every_row_and_the_counter_then_changes_nothing(
    conn: echomq.Connection, queue: str
) -> None:
    ks = Keyspace(queue)
    ids = await old_queue(conn, ks, pending=3)
    assert await admin.migrate(conn, queue) == len(ids)
    for job_id in ids:
        row = await conn.execute("HGETALL", ks.job(job_id))
        fields = dict(zip(row[::2], row[1::2], strict=True))
        assert b"attempts" not in fields
        assert fields[b"token"] == (b"0" if job_id.startswith("p") else b"1")
    assert await conn.execute("LRANGE", ks.job("done") + ":logs", 0, -1) == [b"a log line"]
    stopped = await jobs.get_job(conn, queue, "stopped")
    assert stopped is not None and stopped.cancelled
    assert (stopped.state, stopped.cancel_reason, stopped.result) == ("cancelled", "bye", None)
    assert await conn.execute("ZSCORE", ks.completed, "stopped") is None
    assert await conn.execute("ZSCORE", ks.cancelled, "stopped") is not None
    assert row_outcome(stopped) == Outcome(state=FinishState.CANCELLED, reason="bye")
    done = await jobs.get_job(conn, queue, "done")
    assert done is not None and (done.state, done.result) == ("completed", b"R")
    stats = await admin.stats(conn, queue)
    assert (stats.completed, stats.cancelled) == (1, 1)
    assert await conn.execute("EXISTS", ks.base + "metrics:failed") == 0
    assert await conn.execute("HGET", ks.metrics_dead, "count") == b"2"
    assert (await admin.stats(conn, queue)).dead_total == 2
    assert await admin.ensure_schema(conn, queue) == SCHEMA_VERSION
    info = await jobs.get_job(conn, queue, "held")
    assert info is not None and (info.state, info.token) == ("active", 1)

    after = await snapshot(conn, ks)
    assert await admin.migrate(conn, queue) == 0  # idempotent: a migrated queue is left alone
    assert await snapshot(conn, ks) == after


async def test_migrate_goes_a_page_at_a_time_and_keeps_the_larger_token(
    conn: echomq.Connection, queue: str
) -> None:
    """A small budget: many calls, each bounded, the version written by the last one
    only; a row holding both names (producers of both layouts) keeps the larger token."""
    ks = Keyspace(queue)
    ids = await old_queue(conn, ks, pending=40)
    await conn.execute("HSET", ks.job("p0"), "token", "7")  # written by a layout-2 claim
    cursor, steps, rewritten = "0", 0, 0
    while True:
        step = await admin.migrate_step(conn, queue, cursor=cursor, budget=5)
        steps += 1
        rewritten += step.rewritten
        if step.done:
            break
        assert await conn.execute("HGET", ks.meta, "schema_version") == b"1"
        cursor = step.cursor
    assert steps > 2 and rewritten == len(ids)
    assert await conn.execute("HGET", ks.meta, "schema_version") == str(SCHEMA_VERSION).encode()
    assert await conn.execute("HMGET", ks.job("p0"), "token", "attempts") == [b"7", None]


async def test_a_stale_token_still_cannot_settle_after_the_migration(
    conn: echomq.Connection, queue: str
) -> None:
    """The held job's lease ran out under layout 1: after the migration a reap and a new
    claim take it with token 2; the old holder's token 1 is stale for complete and fail."""
    ks = Keyspace(queue)
    await old_queue(conn, ks, pending=0)
    await admin.migrate(conn, queue)
    assert await jobs.reap(conn, queue) == ["held"]
    [claimed] = await jobs.claim(conn, queue, lease_ms=30_000, count=1)
    assert (claimed.id, claimed.token) == ("held", 2)
    with pytest.raises(StaleToken):
        await jobs.complete(conn, queue, "held", 1, b"late")
    with pytest.raises(StaleToken):
        await jobs.fail(conn, queue, "held", 1, "late")
    await jobs.complete(conn, queue, "held", 2, b"ok")
    info = await jobs.get_job(conn, queue, "held")
    assert info is not None and (info.state, info.token, info.result) == ("completed", 2, b"ok")


async def test_migrate_refuses_bad_input_an_unknown_queue_and_a_newer_layout(
    conn: echomq.Connection, queue: str
) -> None:
    ks = Keyspace(queue)
    with pytest.raises(QueueNotFound):
        await admin.migrate(conn, queue)
    assert await conn.execute("EXISTS", ks.meta) == 0
    with pytest.raises(InvalidArgument):
        await admin.migrate_step(conn, queue, budget=0)
    with pytest.raises(InvalidArgument):
        await admin.migrate_step(conn, queue, cursor="x")
    await conn.execute("HSET", ks.meta, "schema_version", str(SCHEMA_VERSION + 1))
    with pytest.raises(SchemaMismatch, match="newer"):
        await admin.migrate(conn, queue)
