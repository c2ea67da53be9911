"""Flows across queues on Redis Cluster (docs/flows.md "Across queues"): a parent and its
child on two masters, told through the child's queue's outbox; a reprocessed child's
`reopen` relayed back; a relay or a reprocess that meets a moved key changes nothing and
goes through after the move."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import trio
from tests.flows._app import make_app, running

import echomq
from echomq import flows, jobs
from echomq._scripts.keyspace import Keyspace
from echomq._wire.hashslots import key_slot
from echomq.errors import ServerError
from echomq.testing import ClusterNode, RedisCluster

from ._support import until

LIMIT = 20


def other_master(cluster: RedisCluster, slot: int) -> ClusterNode:
    owner = cluster.owner(slot)
    return next(m for m in cluster.masters() if m is not owner)


def two_masters(cluster: RedisCluster) -> tuple[str, str]:
    """Two new queue names whose slots two different masters serve."""
    first = f"fa-{uuid.uuid4().hex[:8]}"
    owner = cluster.owner(key_slot(Keyspace(first).base))
    while True:
        second = f"fb-{uuid.uuid4().hex[:8]}"
        if cluster.owner(key_slot(Keyspace(second).base)) is not owner:
            return first, second


async def fields(conn: Any, queue: str, job_id: str, *names: str) -> list[str | None]:
    got = await conn.execute("HMGET", Keyspace(queue).job(job_id), *names)
    return [None if v is None else v.decode() for v in got]


async def test_queues_above_and_below_one_another_on_two_masters(
    redis_cluster: RedisCluster,
) -> None:
    """R on A over M on B over L on A, each queue on its own master, policy fail: L's
    death fails M, M's fails R; reprocessing L re-opens M, and M's re-open re-opens R,
    each through its queue's outbox; then the flow completes with L's new result."""
    a, b = two_masters(redis_cluster)
    qa, ta = make_app(a, redis_cluster.url)
    qb, tb = make_app(b, redis_cluster.url)
    ok = {"now": False}

    @qa.task(name="maybe")
    async def maybe(x: int) -> int:
        if not ok["now"]:
            raise RuntimeError("not yet")
        return x

    async with running(qa), running(qb):
        conn = qa.connection
        canvas = echomq.flow(
            ta["collect"].s().set(job_id="R"),
            [echomq.flow(tb["collect"].s().set(job_id="M"), [maybe.s(4).set(job_id="L")])],
        )
        handle = await canvas.apply()
        with trio.fail_after(LIMIT), pytest.raises(echomq.JobFailed):
            await handle.result()
        explained = await jobs.explain(conn, b, "M")
        assert (explained.parent, explained.parent_queue) == ("R", a)
        ok["now"] = True
        await jobs.reprocess_job(conn, a, "L")

        async def completed() -> bool:
            return await fields(conn, a, "R", "state") == ["completed"]

        await until(completed, LIMIT)
        assert await qa.handle("R").result() == [[4]]
        assert await fields(conn, b, "M", "gen") == ["1"]


async def _dead_parent_of_a_dead_child(conn: Any, a: str, b: str) -> None:
    """P on A, dead: its child C on B died (relayed), failing it (policy fail)."""
    _qa, ta = make_app(a, "redis://unused")
    _qb, tb = make_app(b, "redis://unused")
    flow = echomq.flow(ta["collect"].s().set(job_id="P"), [tb["add"].s(1).set(job_id="C")])
    await flows.add_flow(conn, flow.flow_jobs())
    [c] = await jobs.claim(conn, b, 60_000)
    await jobs.fail(conn, b, c.id, c.token, "boom", dead=True)
    assert await flows.relay_outbox(conn, b, "relay", idle_ms=0) == 1
    [p] = await jobs.claim(conn, a, 60_000)
    await jobs.fail(conn, a, p.id, p.token, "ChildFailed", dead=True)
    assert await fields(conn, a, "P", "state", "open", "failed") == ["dead", "0", "1"]


async def test_a_reopen_that_meets_a_moved_key_changes_nothing(
    fault_cluster: RedisCluster,
) -> None:
    """flow_notify reads every key the re-open writes (here the parent's children list,
    only re-timed by it) before its first write: mid-migration it stops having written
    nothing (the entry stays unacknowledged), and relays after the move."""
    a, b = two_masters(fault_cluster)
    slot = key_slot(Keyspace(a).base)
    async with echomq.connect(fault_cluster.url, connect_timeout=5) as conn:
        await _dead_parent_of_a_dead_child(conn, a, b)
        await jobs.reprocess_job(conn, b, "C")
        migration = fault_cluster.start_migration(slot, other_master(fault_cluster, slot))
        try:
            migration.move_keys([Keyspace(a).children("P")])
            async with echomq.connect(fault_cluster.url, connect_timeout=0.1) as hasty:
                with pytest.raises(ServerError, match="non local key"):
                    await flows.relay_outbox(hasty, b, "hasty", idle_ms=0)
            remote = await conn.execute("HGET", Keyspace(a).remote_children("P"), "C")
            before = await fields(conn, a, "P", "state", "open", "failed")
        finally:
            await trio.to_thread.run_sync(migration.finish)
        assert (remote, before) == (b.encode(), ["dead", "0", "1"])
        assert await flows.relay_outbox(conn, b, "relay", idle_ms=0) == 1
        assert await fields(conn, a, "P", "state", "open", "failed") == ["waiting", "1", "0"]
        assert await flows.remote_children(conn, a, "P") == {"C": b}
        entry = await conn.execute("HGET", Keyspace(a).remote_children("P"), "C")
        assert entry == f"{b}#1".encode()


async def test_a_reprocess_that_meets_a_moved_outbox_changes_nothing(
    fault_cluster: RedisCluster,
) -> None:
    """reprocess_job of a child whose parent is on another queue reads its queue's outbox
    before its first write: with the outbox moved away mid-migration it is refused having
    written nothing (the child still dead, no generation); after the move it goes through."""
    a, b = two_masters(fault_cluster)
    slot = key_slot(Keyspace(b).base)
    async with echomq.connect(fault_cluster.url, connect_timeout=5) as conn:
        await _dead_parent_of_a_dead_child(conn, a, b)
        ks = Keyspace(b)
        await jobs.enqueue(conn, b, b"x")  # every declared key exists (else: TRYAGAIN)
        await jobs.add_log(conn, b, "C", "a line")
        declared = [ks.job("C"), ks.dead, ks.pending, ks.wake, ks.logs("C")]
        assert await conn.execute("EXISTS", *declared) == len(declared)
        migration = fault_cluster.start_migration(slot, other_master(fault_cluster, slot))
        try:
            migration.move_keys([ks.outbox])
            async with echomq.connect(fault_cluster.url, connect_timeout=0.1) as hasty:
                with pytest.raises(ServerError, match="non local key"):
                    await jobs.reprocess_job(hasty, b, "C")
            before = await fields(conn, b, "C", "state", "gen")
        finally:
            await trio.to_thread.run_sync(migration.finish)
        assert before == ["dead", None]
        await jobs.reprocess_job(conn, b, "C")
        assert await fields(conn, b, "C", "state", "gen") == ["pending", "1"]
        assert await flows.relay_outbox(conn, b, "relay", idle_ms=0) == 1
        assert await fields(conn, a, "P", "state", "open", "failed") == ["waiting", "1", "0"]


async def test_a_group_mid_chain_and_an_errback_across_two_masters(
    redis_cluster: RedisCluster,
) -> None:
    """chain(a on A, group(b, c on B), total on A): the group job on B spawns its members
    there and its result reaches the last step on A through B's outbox; a job on A that
    dies with an errback on B has it enqueued on B through A's outbox; a job on A that
    spawns children on B is resumed with their results (each queue on its own master)."""
    a, b = two_masters(redis_cluster)
    qa, ta = make_app(a, redis_cluster.url)
    qb, tb = make_app(b, redis_cluster.url)
    seen: list[tuple[str, str]] = []

    @qb.task(name="on_error")
    async def on_error(job_id: str, error: str) -> None:
        seen.append((job_id, error))

    @qa.task(name="fan")
    async def fan(job: echomq.Job) -> Any:
        await job.spawn([tb["add"].s(1), tb["add"].s(2)])
        return await job.wait_children()

    async with running(qa), running(qb):
        canvas = echomq.chain(
            ta["add"].s(1), echomq.group(tb["add"].s(10), tb["add"].s(20)), ta["total"].s()
        )
        handle = await canvas.apply()
        dying = await ta["boom"].s().set(job_id="D", link_error=on_error.s()).apply()
        fanned = await fan.delay()
        with trio.fail_after(LIMIT):
            assert await handle.result() == 11 + 21
            assert await fanned.result() == [1, 2]
        await until(lambda: len(seen) == 1, LIMIT)
    assert seen == [(dying.id, "ValueError: boom")]
