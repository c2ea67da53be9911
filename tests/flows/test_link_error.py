"""Error callbacks (docs/flows.md "Error callbacks"): ``link_error=`` on a signature or a
flow node runs a signature with the dead job's id and error, once, where the job dies
(not on a retry); on another queue through the dying job's queue's outbox. Run on one
server and on the local cluster."""

from __future__ import annotations

from typing import Any

import pytest
import trio

import echomq
from echomq import flows, jobs, stalled
from echomq._scripts.keyspace import Keyspace

from ._app import make_app, running, until

LIMIT = 15


def with_errback(q: echomq.Queue, seen: list[tuple[str, str, Any]]) -> Any:
    @q.task(name="on_error")
    async def on_error(job_id: str, error: str, tag: Any = None) -> str:
        seen.append((job_id, error, tag))
        return job_id

    return on_error


async def test_a_dead_signature_runs_its_errback_once(redis_url: str, queue: str) -> None:
    """The job fails twice (max_attempts 2): no errback on the retry, one after the
    second failure, with the job's id, its error and the errback's own argument."""
    q, _ = make_app(queue, redis_url)
    seen: list[tuple[str, str, Any]] = []
    on_error = with_errback(q, seen)
    runs: list[int] = []

    @q.task(name="flaky", max_attempts=2, backoff=0)
    async def flaky() -> None:
        runs.append(1)
        raise ValueError("flaky")

    async with running(q):
        handle = await flaky.s().set(link_error=on_error.s(tag="x")).apply()
        await until(lambda: len(seen) == 1, LIMIT)
        info = await q.handle(handle.id).info()
        assert info is not None and info.state == "dead"
    assert len(runs) == 2
    assert seen == [(handle.id, "ValueError: flaky", "x")]


async def test_no_errback_when_it_completes(redis_url: str, queue: str) -> None:
    """A job that completes runs no errback."""
    q, t = make_app(queue, redis_url)
    seen: list[tuple[str, str, Any]] = []
    on_error = with_errback(q, seen)
    async with running(q):
        handle = await t["add"].s(1, 2).set(link_error=on_error.s()).apply()
        with trio.fail_after(LIMIT):
            assert await handle.result() == 3
    assert seen == []


async def test_a_chains_errback_hears_of_a_failed_step(redis_url: str, queue: str) -> None:
    """chain(add, boom, add, link_error=cb) under policy fail: boom dies, the chain's last
    job dies of it (ChildFailed), and the errback runs once with that job's id and an
    error naming boom's job."""
    q, t = make_app(queue, redis_url)
    seen: list[tuple[str, str, Any]] = []
    on_error = with_errback(q, seen)
    async with running(q):
        canvas = echomq.chain(
            t["add"].s(1), t["boom"].s().set(job_id="B"), t["add"].s(2), link_error=on_error.s()
        )
        handle = await canvas.apply()
        await until(lambda: len(seen) == 1, LIMIT)
    [(job_id, error, _)] = seen
    assert job_id == handle.id
    assert error.startswith("ChildFailed: child B dead: ValueError: boom")


async def test_an_errback_on_another_queue(redis_url: str, queue: str) -> None:
    """The errback's task is on queue B: the dying script writes an outbox entry on A,
    the relay enqueues it on B (another hash tag: on a cluster, another slot)."""
    qa, ta = make_app(queue, redis_url)
    qb, _ = make_app(queue + "-b", redis_url)
    seen: list[tuple[str, str, Any]] = []
    on_error = with_errback(qb, seen)
    async with running(qa, recovery_interval=60), running(qb, recovery_interval=60):
        sig = ta["boom"].s().set(link_error=on_error.s(tag=7))
        handle = await sig.apply()
        await until(lambda: len(seen) == 1, LIMIT)
        outbox = Keyspace(qa.name).outbox
        await until(lambda: _empty(qa.connection, outbox), LIMIT)
    assert seen == [(handle.id, "ValueError: boom", 7)]


async def _empty(conn: echomq.Connection, key: str) -> bool:
    return int(await conn.execute("XLEN", key)) == 0


async def test_a_group_gives_each_member_its_errback(redis_url: str, queue: str) -> None:
    """group(boom, boom, add, link_error=cb): each dead member runs the callback once."""
    q, t = make_app(queue, redis_url)
    seen: list[tuple[str, str, Any]] = []
    on_error = with_errback(q, seen)
    async with running(q):
        canvas = echomq.group(
            t["boom"].s().set(job_id="m1"),
            t["boom"].s().set(job_id="m2"),
            t["add"].s(1),
            link_error=on_error.s(),
        )
        await canvas.apply()
        await until(lambda: len(seen) == 2, LIMIT)
    assert sorted(s[0] for s in seen) == ["m1", "m2"]


def test_link_error_must_be_a_signature() -> None:
    """Bad input: a typed error before any I/O."""
    q = echomq.Queue("q")

    @q.task
    async def t() -> None: ...

    with pytest.raises(echomq.errors.InvalidArgument):
        t.s().set(link_error="nope")
    with pytest.raises(echomq.errors.InvalidArgument):
        echomq.chain(t.s(), link_error=echomq.group(t.s()))


async def test_a_stalled_death_runs_the_errback(
    redis_url: str, queue: str, conn: echomq.Connection
) -> None:
    """The stalled sweep dead-letters a job whose lease lapsed: the sweep's script
    enqueues its errback, which runs with the error ``stalled``."""
    q, t = make_app(queue, redis_url)
    seen: list[tuple[str, str, Any]] = []
    on_error = with_errback(q, seen)
    async with q.open():
        [root] = t["slow"].s(1).set(job_id="S", link_error=on_error.s()).flow_jobs()
        await flows.add_flow(conn, [root])
        [held] = await jobs.claim(conn, queue, 1)
        assert held.id == "S"

        async def swept() -> bool:
            await stalled.check(conn, queue, max_stalled=1)
            info = await jobs.get_job(conn, queue, "S")
            return info is not None and info.state == "dead"

        await until(swept, LIMIT)
    async with running(q):
        await until(lambda: len(seen) == 1, LIMIT)
    assert seen == [("S", "stalled", None)]
