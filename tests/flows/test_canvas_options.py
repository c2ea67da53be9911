"""Immutable signatures (``task.si``) and delayed flows (``apply(delay=, at=)``): a step
that is not given the previous result still runs after it; a delayed flow's leaves wait
in the schedule, on the server's clock (docs/flows.md)."""

from __future__ import annotations

import datetime as dt
import time

import pytest
import trio

import echomq
from echomq import flows, jobs
from echomq._scripts.keyspace import Keyspace
from echomq.errors import InvalidArgument

from ._app import make_app, running

LIMIT = 10


async def test_an_immutable_step_runs_after_the_previous_one_without_its_result(
    redis_url: str, queue: str
) -> None:
    q, t = make_app(queue, redis_url)
    async with running(q):
        chained = await echomq.chain(t["add"].s(1, 2), t["add"].si(10, 5), t["add"].s(100)).apply()
        chord = await echomq.chord([t["add"].s(i) for i in range(3)], t["add"].si(7)).apply()
        with trio.fail_after(LIMIT):
            assert await chained.result() == 115  # (10 + 5), then + 100
            assert await chord.result() == 7
    assert t["ran"]["add"] == 3 + 3 + 1
    assert repr(t["add"].si(1)) == "add.si(*(1,), **{})"


async def test_an_immutable_step_is_bound_without_the_previous_result() -> None:
    _, t = make_app("bind-check", "redis://127.0.0.1:1/0")
    with pytest.raises(TypeError):  # add takes (x, y=0): no room for a fed value and 2 more
        echomq.chain(t["add"].s(1), t["add"].s(1, 2)).flow_jobs()
    echomq.chain(t["add"].s(1), t["add"].si(1, 2)).flow_jobs()  # si: bound as given


async def test_a_delayed_flow_starts_when_its_delay_is_over(redis_url: str, queue: str) -> None:
    q, t = make_app(queue, redis_url)
    async with running(q):
        started = time.time()
        handle = await echomq.chain(t["add"].s(1, 2), t["add"].s(10)).apply(
            delay=dt.timedelta(milliseconds=600)
        )
        with trio.fail_after(LIMIT):
            assert await handle.result() == 13
        took = time.time() - started
    assert took >= 0.55


async def test_a_delayed_flow_across_queues(
    conn: echomq.Connection, redis_url: str, queue: str
) -> None:
    """The chord's members on queue B (another hash tag): they wait in B's schedule, the
    callback waits on A, and the flow runs once the delay is over."""
    qa, ta = make_app(queue, redis_url)
    qb, tb = make_app(queue + "-b", redis_url)
    async with running(qa, recovery_interval=60), running(qb, recovery_interval=60):
        started = time.time()
        canvas = echomq.chord([tb["add"].s(1), tb["add"].s(2)], ta["total"].s())
        handle = await canvas.apply(delay=0.6)
        assert (await echomq.admin.stats(conn, qb.name)).scheduled == 2
        with trio.fail_after(LIMIT):
            assert await handle.result() == 3
        took = time.time() - started
    assert took >= 0.55


async def test_a_delayed_flows_leaves_wait_in_the_schedule(
    conn: echomq.Connection, redis_url: str, queue: str
) -> None:
    q, t = make_app(queue, redis_url)
    ks = Keyspace(queue)
    async with q.open():
        at = dt.datetime.now() + dt.timedelta(hours=1)
        handle = await echomq.chord([t["add"].s(1), t["add"].s(2)], t["total"].s()).apply(at=at)
        root = await jobs.get_job(conn, queue, handle.id)
        scheduled = await conn.execute("ZRANGE", ks.schedule, 0, -1, "WITHSCORES")
        stats = await echomq.admin.stats(conn, queue)
    assert root is not None and root.state == "waiting"
    assert stats.scheduled == 2 and stats.pending == 0
    for score in scheduled[1::2]:  # each leaf due at `at`, within the clocks' difference
        assert abs(float(score) / 1000 - at.timestamp()) < 5


async def test_bad_flow_delays_are_refused_before_any_io(redis_url: str, queue: str) -> None:
    _, t = make_app(queue, redis_url)
    canvas = echomq.chain(t["add"].s(1), t["add"].s(2))
    with pytest.raises(InvalidArgument):
        canvas.flow_jobs(delay=1, at=time.time() + 5)
    with pytest.raises(InvalidArgument):
        canvas.flow_jobs(delay=-1)
    parent_delayed = echomq.chain(t["add"].s(1), t["add"].s(2).set(delay=5)).flow_jobs()
    with pytest.raises(InvalidArgument, match="only a flow's leaves can be delayed"):
        flows.add_flow_calls(parent_delayed)
