"""The discovery verb and the views the CLI and the dashboard read (``echomq.admin``):
``list_queues`` finds every queue on every master; ``active_jobs`` / ``dead_jobs`` answer
typed rows; none of them writes."""

from __future__ import annotations

import pytest

import echomq
from echomq import admin, jobs
from echomq._scripts.keyspace import Keyspace
from echomq.errors import InvalidArgument, InvalidKey

from ._support import snapshot


async def test_list_queues_finds_every_queue(conn: echomq.Connection, queue: str) -> None:
    """Queues whose names hash to different masters (on a cluster) are all found."""
    names = [f"{queue}-{i}" for i in range(6)]
    for name in names:
        await jobs.enqueue(conn, name, b"x")
    found = await admin.list_queues(conn)
    assert set(names) <= set(found) and found == sorted(found)
    assert len(await admin.list_queues(conn, limit=2)) == 2


async def test_list_queues_skips_keys_that_are_not_a_queues(
    conn: echomq.Connection, queue: str
) -> None:
    """A meta-looking key whose name is not a valid queue name is not a queue."""
    bad = "emq:{bad name!}:meta"
    await conn.execute("HSET", bad, "x", "1")
    try:
        assert "bad name!" not in await admin.list_queues(conn)
    finally:
        await conn.execute("DEL", bad)


async def test_views_answer_typed_rows_and_write_nothing(
    conn: echomq.Connection, queue: str
) -> None:
    a = await jobs.enqueue(conn, queue, b'{"task":"t","args":[],"kwargs":{}}')
    b = await jobs.enqueue(conn, queue, b"\xffraw")
    [held_a, held_b] = await jobs.claim(conn, queue, 60_000, count=2)
    await jobs.update_progress(conn, queue, a, "40")
    await jobs.add_log(conn, queue, a, "first")
    await jobs.add_log(conn, queue, a, "last")
    await jobs.fail(conn, queue, b, held_b.token, "boom", dead=True)
    await jobs.add_log(conn, queue, b, "why")
    before = await snapshot(conn, Keyspace(queue))
    [active] = await admin.active_jobs(conn, queue, limit=10)
    [dead] = await admin.dead_jobs(conn, queue, limit=10, log_lines=5)
    assert (active.id, active.token, active.progress, active.last_log) == (a, 1, "40", "last")
    assert active.payload == b'{"task":"t","args":[],"kwargs":{}}'
    assert active.lease_deadline_ms > 0 and active.claimed_at_ms is not None
    assert (dead.id, dead.failures, dead.last_error, dead.logs) == (b, 1, "boom", ["why"])
    assert dead.payload == b"\xffraw" and dead.died_at_ms > 0
    assert held_a.id == a
    assert await snapshot(conn, Keyspace(queue)) == before
    assert await admin.server_now_ms(conn) >= dead.died_at_ms


async def test_views_gate_their_arguments(conn: echomq.Connection, queue: str) -> None:
    for bad in (0, admin.MAX_VIEW + 1, True):
        with pytest.raises(InvalidArgument):
            await admin.active_jobs(conn, queue, limit=bad)
        with pytest.raises(InvalidArgument):
            await admin.dead_jobs(conn, queue, log_lines=bad)
    with pytest.raises(InvalidKey):
        await admin.dead_jobs(conn, "no good")
    with pytest.raises(InvalidArgument):
        await admin.list_queues(conn, limit=0)
