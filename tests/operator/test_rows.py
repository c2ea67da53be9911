"""The per-job verbs of the operator plane (docs/operations.md): update_data, update_progress,
add_log, get_job_logs, remove_job, reprocess_job. Every branch, every refusal changes
nothing."""

from __future__ import annotations

import json

import pytest
import trio
from _operator_support import snapshot

import echomq
from echomq import admin, jobs
from echomq._scripts.keyspace import Keyspace
from echomq._wire.dial import open_pubsub
from echomq.errors import InvalidArgument, InvalidKey, JobGone, JobLocked, NotDead

LEASE = 200


async def dead_job(conn: echomq.Connection, queue: str, **kw: object) -> str:
    """Enqueue, claim and fail one job to death; answer its id."""
    job_id = await jobs.enqueue(conn, queue, b"p", **kw)  # type: ignore[arg-type]
    [c] = await jobs.claim(conn, queue, LEASE)
    assert c.id == job_id
    assert await jobs.fail(conn, queue, job_id, c.token, "boom", dead=True) == "dead"
    return job_id


# -- update_data -----------------------------------------------------------------------------


async def test_update_data_replaces_the_payload(conn: echomq.Connection, queue: str) -> None:
    """update_data writes the new payload onto the row."""
    job_id = await jobs.enqueue(conn, queue, b"old")
    await jobs.update_data(conn, queue, job_id, "new")
    info = await jobs.get_job(conn, queue, job_id)
    assert info is not None and info.payload == b"new"


async def test_update_data_of_missing_job_is_gone(conn: echomq.Connection, queue: str) -> None:
    """update_data on a missing row raises JobGone and writes no row."""
    with pytest.raises(JobGone):
        await jobs.update_data(conn, queue, "nope", b"x")
    assert await snapshot(conn, queue) == {}


async def test_update_data_rejects_bad_input_before_io(closed_port_url: str) -> None:
    """A bad id or payload is refused before any I/O (the URL points nowhere)."""
    async with echomq.connect(closed_port_url) as c:
        with pytest.raises(InvalidKey):
            await jobs.update_data(c, "q", "bad id", b"x")
        with pytest.raises(echomq.errors.SerializationError):
            await jobs.update_data(c, "q", "ok", 42)  # type: ignore[arg-type]


# -- update_progress ---------------------------------------------------------------------------


async def test_update_progress_writes_field_and_publishes_event(
    conn: echomq.Connection, queue: str, redis_url: str
) -> None:
    """update_progress sets the row's progress and publishes the progress event."""
    job_id = await jobs.enqueue(conn, queue, b"p")
    async with open_pubsub(redis_url) as ps:
        await ps.subscribe(Keyspace(queue).events)
        await jobs.update_progress(conn, queue, job_id, 42)
        with trio.fail_after(2):
            msg = await ps.receive()
    assert json.loads(msg.data) == {"event": "progress", "job": job_id, "progress": "42"}
    info = await jobs.get_job(conn, queue, job_id)
    assert info is not None and info.progress == "42"


async def test_update_progress_of_missing_job_is_gone_and_silent(
    conn: echomq.Connection, queue: str, redis_url: str
) -> None:
    """update_progress on a missing row raises JobGone, writes nothing and publishes nothing."""
    async with open_pubsub(redis_url) as ps:
        await ps.subscribe(Keyspace(queue).events)
        with pytest.raises(JobGone):
            await jobs.update_progress(conn, queue, "ghost", "10")
        await conn.execute("PUBLISH", Keyspace(queue).events, "marker")
        with trio.fail_after(2):
            msg = await ps.receive()
    assert msg.data == b"marker"
    assert await snapshot(conn, queue) == {}


@pytest.mark.parametrize("bad", [True, None, float("nan"), [1]])
async def test_update_progress_rejects_bad_value(closed_port_url: str, bad: object) -> None:
    """A progress that is not a str or finite number is refused before any I/O."""
    async with echomq.connect(closed_port_url) as c:
        with pytest.raises(InvalidArgument):
            await jobs.update_progress(c, "q", "j", bad)  # type: ignore[arg-type]


# -- add_log / get_job_logs -------------------------------------------------------------------


async def test_add_log_appends_and_counts(conn: echomq.Connection, queue: str) -> None:
    """add_log answers the line count; get_job_logs reads them in append order."""
    job_id = await jobs.enqueue(conn, queue, b"p")
    assert await jobs.get_job_logs(conn, queue, job_id) == []
    assert await jobs.add_log(conn, queue, job_id, "one") == 1
    assert await jobs.add_log(conn, queue, job_id, "two") == 2
    assert await jobs.get_job_logs(conn, queue, job_id) == ["one", "two"]


async def test_add_log_with_keep_trims_to_the_last_lines(
    conn: echomq.Connection, queue: str
) -> None:
    """With keep, only the last `keep` lines stay and the answer is the count kept."""
    job_id = await jobs.enqueue(conn, queue, b"p")
    for i in range(4):
        await jobs.add_log(conn, queue, job_id, f"l{i}")
    assert await jobs.add_log(conn, queue, job_id, "l4", keep=2) == 2
    assert await jobs.get_job_logs(conn, queue, job_id) == ["l3", "l4"]
    assert await jobs.add_log(conn, queue, job_id, "l5", keep=10) == 3


async def test_add_log_of_missing_job_is_gone(conn: echomq.Connection, queue: str) -> None:
    """add_log and get_job_logs on a missing row raise JobGone; no list is created."""
    with pytest.raises(JobGone):
        await jobs.add_log(conn, queue, "ghost", "line")
    with pytest.raises(JobGone):
        await jobs.get_job_logs(conn, queue, "ghost")
    assert await snapshot(conn, queue) == {}


@pytest.mark.parametrize("keep", [0, -1, 1.5, True])
async def test_add_log_rejects_bad_keep(closed_port_url: str, keep: object) -> None:
    """keep must be a positive int, checked before any I/O."""
    async with echomq.connect(closed_port_url) as c:
        with pytest.raises(InvalidArgument):
            await jobs.add_log(c, "q", "j", "x", keep=keep)  # type: ignore[arg-type]


# -- remove_job ---------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["pending", "scheduled", "active", "dead", "completed"])
async def test_remove_job_from_every_state(
    conn: echomq.Connection, queue: str, redis_url: str, where: str
) -> None:
    """remove_job takes the id out of whichever set holds it, with row and logs."""
    ks = Keyspace(queue)
    job_id = await jobs.enqueue(conn, queue, b"p", delay_ms=60_000 if where == "scheduled" else 0)
    if where in ("active", "dead", "completed"):
        [c] = await jobs.claim(conn, queue, 5000)
        if where == "dead":
            await jobs.fail(conn, queue, job_id, c.token, "x", dead=True)
        elif where == "completed":
            await jobs.complete(conn, queue, job_id, c.token, b"r")
    await jobs.add_log(conn, queue, job_id, "a line")
    async with open_pubsub(redis_url) as ps:
        await ps.subscribe(ks.events)
        await jobs.remove_job(conn, queue, job_id)
        with trio.fail_after(2):
            msg = await ps.receive()
    assert json.loads(msg.data) == {"event": "removed", "job": job_id}
    for key in (ks.pending, ks.schedule, ks.active, ks.dead, ks.completed):
        assert await conn.execute("ZSCORE", key, job_id) is None
    assert await conn.execute("EXISTS", ks.job(job_id), ks.logs(job_id)) == 0


async def test_remove_job_missing_is_gone(conn: echomq.Connection, queue: str) -> None:
    """remove_job of a missing row raises JobGone."""
    with pytest.raises(JobGone):
        await jobs.remove_job(conn, queue, "ghost")


@pytest.mark.parametrize("how", ["key", "field"])
async def test_remove_job_refuses_locked_job(conn: echomq.Connection, queue: str, how: str) -> None:
    """A lock key or a lock field makes remove_job refuse with JobLocked, changing nothing."""
    ks = Keyspace(queue)
    job_id = await jobs.enqueue(conn, queue, b"p")
    await jobs.add_log(conn, queue, job_id, "kept")
    if how == "key":
        await conn.execute("SET", ks.lock(job_id), "operator")
    else:
        await conn.execute("HSET", ks.job(job_id), "lock", "operator")
    before = await snapshot(conn, queue)
    with pytest.raises(JobLocked):
        await jobs.remove_job(conn, queue, job_id)
    assert await snapshot(conn, queue) == before


# -- reprocess_job ----------------------------------------------------------------------------


async def test_reprocess_moves_dead_to_pending_keeping_counters(
    conn: echomq.Connection, queue: str
) -> None:
    """reprocess: dead -> pending, last_error cleared, attempts/failures kept, a wake token."""
    ks = Keyspace(queue)
    job_id = await dead_job(conn, queue)
    await conn.execute("DEL", ks.wake)
    await jobs.reprocess_job(conn, queue, job_id)
    info = await jobs.get_job(conn, queue, job_id)
    assert info is not None
    assert info.state == "pending" and info.last_error is None
    assert (info.token, info.failures) == (1, 1)
    assert await conn.execute("ZSCORE", ks.dead, job_id) is None
    assert await conn.execute("ZSCORE", ks.pending, job_id) is not None
    assert await conn.execute("LLEN", ks.wake) == 1
    [c] = await jobs.claim(conn, queue, LEASE)
    assert c.id == job_id and c.token == 2


async def test_reprocessed_job_runs_first_in_its_priority_band(
    conn: echomq.Connection, queue: str
) -> None:
    """A reprocessed job goes to the front of its priority band, behind higher priorities."""
    job_id = await dead_job(conn, queue, priority=1)
    low = await jobs.enqueue(conn, queue, b"low", priority=0)
    same = await jobs.enqueue(conn, queue, b"same", priority=1)
    high = await jobs.enqueue(conn, queue, b"high", priority=2)
    await jobs.reprocess_job(conn, queue, job_id)
    claimed = await jobs.claim(conn, queue, LEASE, count=4)
    assert [c.id for c in claimed] == [high, job_id, same, low]


async def test_reprocess_of_live_job_is_not_dead(conn: echomq.Connection, queue: str) -> None:
    """reprocess of a pending job raises NotDead and changes nothing."""
    job_id = await jobs.enqueue(conn, queue, b"p")
    before = await snapshot(conn, queue)
    with pytest.raises(NotDead):
        await jobs.reprocess_job(conn, queue, job_id)
    assert await snapshot(conn, queue) == before


async def test_reprocess_missing_is_gone(conn: echomq.Connection, queue: str) -> None:
    """reprocess of a missing row raises JobGone and writes nothing."""
    with pytest.raises(JobGone):
        await jobs.reprocess_job(conn, queue, "ghost")
    assert await snapshot(conn, queue) == {}


async def test_reprocess_on_paused_queue_waits_until_resume(
    conn: echomq.Connection, queue: str
) -> None:
    """On a paused queue a reprocessed job lands in pending and is claimed only after resume."""
    job_id = await dead_job(conn, queue)
    await admin.pause(conn, queue)
    await jobs.reprocess_job(conn, queue, job_id)
    assert await conn.execute("ZSCORE", Keyspace(queue).pending, job_id) is not None
    assert await jobs.claim(conn, queue, LEASE) == []
    await admin.resume(conn, queue)
    [c] = await jobs.claim(conn, queue, LEASE)
    assert c.id == job_id
