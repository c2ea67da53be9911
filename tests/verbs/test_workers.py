"""The worker records at the verbs: beat, list (with the gone ones, pruned later), forget,
and how explain reads the holder's record."""

from __future__ import annotations

import pytest

import echomq
from _waits import clock_moves
from echomq import admin, jobs
from echomq._scripts.keyspace import Keyspace
from echomq.admin import workers
from echomq.cli import explain_text
from echomq.errors import InvalidArgument, InvalidKey


def _beat(queue: str, **changes: object) -> workers.WorkerBeat:
    fields: dict[str, object] = {
        "host": "box",
        "pid": 42,
        "version": "0.1.0",
        "queues": (queue,),
        "concurrency": 8,
        "lease_ms": 30_000,
        "beat_ms": 5_000,
        "held": 2,
        "running": ("a", "b"),
        "counters": {"completed": 5, "abandoned": 1},
    }
    fields.update(changes)
    return workers.WorkerBeat(**fields)  # type: ignore[arg-type]


async def test_a_beat_writes_the_record_on_the_server_clock(
    conn: echomq.Connection, queue: str
) -> None:
    """last_beat, started_at and blocked_since are server times made from the durations."""
    now = await workers.beat(
        conn, queue, "w-1", _beat(queue, blocked_task="app.resize_image", blocked_job="a"),
        ttl_ms=60_000, up_ms=9_000, blocked_ms=2_300,
    )  # fmt: skip
    found = await admin.list_workers(conn, queue)
    [w] = found.workers
    assert (w.id, w.alive, w.host, w.pid, w.version) == ("w-1", True, "box", 42, "0.1.0")
    assert (w.queues, w.concurrency, w.held, w.running) == ((queue,), 8, 2, ("a", "b"))
    assert w.counters["completed"] == 5 and w.counters["abandoned"] == 1
    assert w.counters["failed"] == 0
    assert (w.last_beat_ms, w.started_at_ms, w.blocked_since_ms) == (now, now - 9_000, now - 2_300)
    assert (w.blocked_task, w.blocked_job, w.blocked) == ("app.resize_image", "a", True)
    ttl = await conn.execute("PTTL", Keyspace(queue).worker("w-1"))
    assert 0 < ttl <= 60_000
    # the next beat replaces the record whole: blocked no longer
    await workers.beat(conn, queue, "w-1", _beat(queue), ttl_ms=60_000, up_ms=9_100)
    [w] = (await admin.list_workers(conn, queue)).workers
    assert not w.blocked and w.blocked_task is None


async def test_a_worker_whose_record_expired_is_listed_gone_then_pruned(
    conn: echomq.Connection, queue: str
) -> None:
    """Gone: its entry stays (alive False, last beat kept) for keep_gone_ms, then goes."""
    await workers.beat(conn, queue, "w-dead", _beat(queue), ttl_ms=1, up_ms=1)
    await workers.beat(conn, queue, "w-live", _beat(queue), ttl_ms=60_000, up_ms=1)
    await clock_moves(conn, 5, Keyspace(queue).meta)
    found = await admin.list_workers(conn, queue)
    assert {w.id: w.alive for w in found.workers} == {"w-dead": False, "w-live": True}
    [dead] = [w for w in found.workers if not w.alive]
    assert dead.last_beat_ms > 0 and dead.silent_ms(found.now_ms) >= 1
    pruned = await admin.list_workers(conn, queue, keep_gone_ms=0)
    assert {w.id for w in pruned.workers} == {"w-dead", "w-live"}  # listed, then pruned
    assert [w.id for w in (await admin.list_workers(conn, queue)).workers] == ["w-live"]


async def test_forget_removes_the_record_and_the_entry(conn: echomq.Connection, queue: str) -> None:
    ks = Keyspace(queue)
    await workers.beat(conn, queue, "w-1", _beat(queue), ttl_ms=60_000, up_ms=1)
    await workers.forget(conn, queue, "w-1")
    assert await conn.execute("EXISTS", ks.worker("w-1"), ks.workers) == 0
    assert (await admin.list_workers(conn, queue)).workers == []


async def test_bad_input_is_refused_before_any_io(closed_port_url: str, queue: str) -> None:
    async with echomq.connect(closed_port_url) as conn:
        with pytest.raises(InvalidKey):
            await workers.beat(conn, queue, "w 1", _beat(queue), ttl_ms=1000, up_ms=1)
        with pytest.raises(InvalidArgument):
            await workers.beat(conn, queue, "w-1", _beat(queue), ttl_ms=0, up_ms=1)
        with pytest.raises(InvalidArgument):
            await workers.beat(conn, queue, "w-1", _beat(queue), ttl_ms=1000, up_ms=-1)
        for limit in (0, 251):
            with pytest.raises(InvalidArgument):
                await admin.list_workers(conn, queue, limit=limit)
        with pytest.raises(InvalidKey):
            await jobs.claim_batch(conn, queue, 1000, worker="no spaces")


async def test_explain_names_the_holder_alive_blocked_or_gone(
    conn: echomq.Connection, queue: str
) -> None:
    """claim(worker=) puts the holder on the row; explain reads its record atomically."""
    await jobs.enqueue(conn, queue, b"x", job_id="j")
    await jobs.claim_batch(conn, queue, 60_000, worker="w-3")
    e = await jobs.explain(conn, queue, "j")
    assert e.job.worker == "w-3" and e.holder is None  # no record yet: nothing said
    await workers.beat(
        conn, queue, "w-3", _beat(queue, blocked_task="resize_image", blocked_job="j"),
        ttl_ms=60_000, up_ms=1, blocked_ms=2_300,
    )  # fmt: skip
    summary = explain_text.summary(await jobs.explain(conn, queue, "j"))
    assert summary.startswith(
        "worker w-3 is alive but its event loop has been blocked for 2.3 s in task resize_image"
    ), summary
    await workers.beat(conn, queue, "w-3", _beat(queue), ttl_ms=60_000, up_ms=1)
    summary = explain_text.summary(await jobs.explain(conn, queue, "j"))
    assert summary.startswith("worker w-3 (box, pid 42) is running it: held with token 1")
    await workers.beat(conn, queue, "w-3", _beat(queue, lease_ms=1), ttl_ms=1, up_ms=1)
    await clock_moves(conn, 5, Keyspace(queue).meta)
    e = await jobs.explain(conn, queue, "j")
    assert e.holder is not None and not e.holder.alive
    assert explain_text.summary(e).startswith("worker w-3 is gone (no heartbeat for ")
    facts = dict(explain_text.facts(e))
    assert facts["holder"].startswith("worker w-3 is gone")
    # a claim without a worker id clears the holder
    await jobs.release(conn, queue, [("j", 1)])
    await jobs.claim_batch(conn, queue, 60_000)
    assert (await jobs.explain(conn, queue, "j")).job.worker is None
