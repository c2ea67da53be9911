"""Dynamic children (docs/flows.md "Dynamic children"): ``await job.spawn([...])`` adds
children to the running job, once per job, fenced by its claim's token;
``await job.wait_children()`` frees the slot while they run and resumes the job once they
finished, with their results. Run on one server and on the local cluster."""

from __future__ import annotations

from typing import Any

import pytest
import trio

import echomq
from echomq import flows, jobs
from echomq._model.steps import StepRecord
from echomq._scripts.keyspace import Keyspace
from echomq.errors import StaleToken

from ._app import make_app, running, until

LIMIT = 15


def spawner(q: echomq.Queue, children: Any, runs: list[int], **spawn: Any) -> Any:
    @q.task(name="fan")
    async def fan(job: echomq.Job) -> Any:
        runs.append(job.attempt)
        ids = await job.spawn(children(), **spawn)
        results = await job.wait_children()
        assert job.children_results() == results and len(ids) == len(children())
        return results

    return fan


async def test_spawn_then_wait_resumes_with_the_results(redis_url: str, queue: str) -> None:
    """The parent runs twice (the first run stops at the wait, its slot freed); each child
    runs once; the second run spawns nothing and gets the results in order."""
    q, t = make_app(queue, redis_url)
    runs: list[int] = []
    fan = spawner(q, lambda: [t["add"].s(1, 2), echomq.chain(t["add"].s(3), t["add"].s(4))], runs)
    async with running(q):
        handle = await fan.delay()
        with trio.fail_after(LIMIT):
            assert await handle.result() == [3, 7]
    assert runs == [1, 2]
    assert t["ran"] == {"add": 3}


async def test_a_retried_run_spawns_the_same_children_once(redis_url: str, queue: str) -> None:
    """The first run spawns, then fails (a retry): the retry's spawn names the same jobs
    and adds none; each child runs once."""
    q, t = make_app(queue, redis_url)
    runs: list[int] = []

    @q.task(name="fan", max_attempts=2, backoff=0)
    async def fan(job: echomq.Job) -> Any:
        runs.append(job.attempt)
        ids = await job.spawn([t["add"].s(1), t["add"].s(2)])
        if job.attempt == 1:
            raise RuntimeError("after the spawn")
        return [ids, await job.wait_children()]

    async with running(q):
        handle = await fan.delay()
        with trio.fail_after(LIMIT):
            ids, results = await handle.result()
        kids = await flows.children(q.connection, queue, handle.id)
    assert results == [1, 2] and kids.ids == ids and kids.kids == 2
    assert runs[:2] == [1, 2] and t["ran"] == {"add": 2}  # (a third: it waited)


async def test_children_on_another_queue(redis_url: str, queue: str) -> None:
    """The children on queue B: their finishes reach the waiting parent through B's
    outbox (another hash tag: on a cluster, another slot)."""
    qa, _ = make_app(queue, redis_url)
    qb, tb = make_app(queue + "-b", redis_url)
    runs: list[int] = []
    fan = spawner(qa, lambda: [tb["add"].s(i, 10) for i in range(3)], runs)
    async with running(qa, recovery_interval=60), running(qb, recovery_interval=60):
        handle = await fan.delay()
        with trio.fail_after(LIMIT):
            assert await handle.result() == [10, 11, 12]
    assert runs == [1, 2] and tb["ran"] == {"add": 3}


async def test_a_failed_child_under_policy_fail_kills_the_parent(
    redis_url: str, queue: str
) -> None:
    """A child dies: the waiting parent is made pending at once, and its next run dies of
    ChildFailed (no retry), naming the child."""
    q, t = make_app(queue, redis_url)
    runs: list[int] = []
    fan = spawner(q, lambda: [t["boom"].s(), t["add"].s(1)], runs)
    async with running(q):
        handle = await fan.apply(max_attempts=3)
        with trio.fail_after(LIMIT), pytest.raises(echomq.JobFailed) as failed:
            await handle.result()
    assert "ChildFailed: child" in str(failed.value) and "ValueError: boom" in str(failed.value)
    assert len(runs) == 2  # not retried


async def test_policy_continue_gives_the_failures(redis_url: str, queue: str) -> None:
    q, t = make_app(queue, redis_url)
    runs: list[int] = []
    fan = spawner(q, lambda: [t["boom"].s(), t["add"].s(1)], runs, policy="continue")
    async with running(q):
        handle = await fan.delay()
        with trio.fail_after(LIMIT):
            out = await handle.result()
    assert out[1] == 1 and "ValueError: boom" in str(out[0])


async def test_a_stale_holders_spawn_and_wait_are_refused(
    redis_url: str, queue: str, conn: echomq.Connection
) -> None:
    """The job's lease went to a newer claim: the older token's spawn and wait change
    nothing; the holder's spawn writes once, and a repeat of it (a later run) adds
    nothing."""
    q, t = make_app(queue, redis_url)
    async with q.open():
        await jobs.enqueue(conn, queue, b"x", job_id="P")
        [old] = await jobs.claim(conn, queue, 1)
        ks = Keyspace(queue)
        await until(lambda: _expired(conn, ks.active, "P"))
        await jobs.reap(conn, queue)
        [new] = await jobs.claim(conn, queue, 60_000)
        assert new.token > old.token
        roots = t["add"].s(1).flow_jobs(ids=lambda: "child-1")
        record = StepRecord(name="spawn-1", state="done", token=old.token).encode()
        stale = flows.Spawn(queue, "P", old.token, "spawn-1", record)
        with pytest.raises(StaleToken):
            await flows.spawn_children(conn, stale, roots)
        with pytest.raises(StaleToken):
            await flows.wait_children(conn, queue, "P", old.token)
        assert await conn.execute("EXISTS", ks.job("child-1")) == 0
        assert await conn.execute("HMGET", ks.job("P"), "kids", "state") == [None, b"active"]
        mine = flows.Spawn(queue, "P", new.token, "spawn-1", record)
        assert await flows.spawn_children(conn, mine, roots) is True
        assert await flows.spawn_children(conn, mine, roots) is False
        assert await conn.execute("HMGET", ks.job("P"), "kids", "open") == [b"1", b"1"]
        assert await flows.wait_children(conn, queue, "P", new.token) == 2
        assert await conn.execute("HGET", ks.job("P"), "state") == b"waiting"


async def _expired(conn: echomq.Connection, active: str, job_id: str) -> bool:
    score = await conn.execute("ZSCORE", active, job_id)
    now = await conn.execute("TIME")
    return score is not None and float(score) < int(now[0]) * 1000 + int(now[1]) // 1000
