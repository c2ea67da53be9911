"""cancel_flow and remove_flow through flow_cancel.lua (docs/flows.md "Cancelling a flow"),
without workers: every state of a big flow removed, what a cancel leaves, the refusals, and
no claim hold left behind."""

from __future__ import annotations

import pytest
from tests.verbs._support import snapshot

import echomq
from echomq import flows, jobs
from echomq._scripts.keyspace import Keyspace

from ._app import make_app


async def no_hold(conn: echomq.Connection, queue: str) -> bool:
    ks = Keyspace(queue)
    return (
        await conn.execute("HGET", ks.meta, "hold") is None
        and int(await conn.execute("ZCARD", ks.holds)) == 0
    )


async def big_chord(q: echomq.Queue, t: dict[str, object], n: int) -> echomq.FlowHandle:
    members = [t["add"].s(i) for i in range(n)]  # type: ignore[attr-defined]
    return await echomq.chord(members, t["total"].s()).apply()  # type: ignore[attr-defined]


async def test_remove_flow_removes_every_state_of_a_big_flow(redis_url: str, queue: str) -> None:
    """600 members (3 pages): one completed, one dead, one running, the rest pending; all
    go with the callback, in pages under a hold that is released."""
    q, t = make_app(queue, redis_url)
    async with q.open():
        conn = q.connection
        handle = await big_chord(q, t, 600)
        done, dead, running = await jobs.claim(conn, queue, 60_000, count=3)
        await jobs.complete(conn, queue, done.id, done.token, b"1")
        await jobs.fail(conn, queue, dead.id, dead.token, "e", dead=True)
        assert await flows.remove_flow(conn, queue, handle.id) == 601
        ks = Keyspace(queue)
        for key in (ks.pending, ks.waiting, ks.active, ks.dead, ks.completed):
            assert int(await conn.execute("ZCARD", key)) == 0, key
        for job_id in (handle.id, done.id, dead.id, running.id):
            assert await jobs.get_job(conn, queue, job_id) is None
        assert await no_hold(conn, queue)
        assert await jobs.claim(conn, queue, 60_000) == []


async def test_cancel_flow_leaves_the_finished_and_flags_the_running(
    redis_url: str, queue: str
) -> None:
    q, t = make_app(queue, redis_url)
    async with q.open():
        conn = q.connection
        handle = await big_chord(q, t, 600)
        done, running = await jobs.claim(conn, queue, 60_000, count=2)
        await jobs.complete(conn, queue, done.id, done.token, b"1")
        assert (
            await flows.cancel_flow(conn, queue, handle.id, "enough") == 600
        )  # 598 members and the callback removed, 1 signalled
        row = await jobs.get_job(conn, queue, running.id)
        assert row is not None and row.state.value == "active"
        flag = await conn.execute("HMGET", Keyspace(queue).job(running.id), "cancel_reason")
        assert flag == [b"enough"]
        finished = await jobs.get_job(conn, queue, done.id)
        assert finished is not None and finished.state.value == "completed"
        assert await no_hold(conn, queue)
        stats = await conn.execute("HGET", Keyspace(queue).metrics_cancelled, "count")
        assert int(stats) == 599  # the waiting members and the callback: cancelled


async def test_a_finished_top_is_not_cancellable_and_its_subtree_still_goes(
    redis_url: str, queue: str
) -> None:
    q, t = make_app(queue, redis_url)
    async with q.open():
        conn = q.connection
        handle = await echomq.chord([t["add"].s(1), t["add"].s(2)], t["total"].s()).apply()
        kid = (await flows.children(conn, queue, handle.id)).ids[0]
        [c] = await jobs.claim(conn, queue, 60_000)
        await jobs.complete(conn, queue, c.id, c.token, b"1")
        with pytest.raises(echomq.NotCancellable):
            await flows.cancel_flow(conn, queue, c.id)  # a finished leaf: nothing below it
        assert await flows.cancel_flow(conn, queue, handle.id) == 2  # the other member, the cb
        assert await jobs.get_job(conn, queue, kid) is not None  # the completed member stays


async def test_a_locked_top_refuses_remove_and_writes_nothing(redis_url: str, queue: str) -> None:
    q, t = make_app(queue, redis_url)
    async with q.open():
        conn = q.connection
        handle = await big_chord(q, t, 300)
        await conn.execute("SET", Keyspace(queue).lock(handle.id), "op")
        before = await snapshot(conn, Keyspace(queue))
        with pytest.raises(echomq.JobLocked):
            await flows.remove_flow(conn, queue, handle.id)
        assert await snapshot(conn, Keyspace(queue)) == before
        with pytest.raises(echomq.JobGone):
            await flows.cancel_flow(conn, queue, "no-such-job")


@pytest.mark.single_node
def test_cancel_sync_and_acancel_of_a_big_flow(redis_url: str, queue: str) -> None:
    """The blocking and asyncio twins take the same path (the blocking driver answers
    HGETALL as a mapping, the trio wire as a list: both read)."""
    import asyncio

    _q, t = make_app(queue, redis_url)
    add, total = t["add"], t["total"]
    handle = echomq.chord([add.s(i) for i in range(600)], total.s()).apply_sync()
    assert handle.cancel_sync("stop") == 601

    async def twin() -> int:
        flow = await echomq.chord([add.s(i) for i in range(600)], total.s()).aapply()
        return await flow.acancel("stop")

    assert asyncio.run(twin()) == 601
