"""The flow verbs against the server: one atomic add, pages, refusals that write nothing,
remove (refused / forced), reprocess re-opening the parent's wait, explain and status."""

from __future__ import annotations

import pytest
import trio
from tests.verbs._support import snapshot

import echomq
from echomq import admin, flows, jobs
from echomq._scripts.keyspace import Keyspace
from echomq.errors import FlowStateError, HasOpenChildren

from ._app import make_app, running, until

LIMIT = 10


async def test_a_refused_flow_writes_nothing(
    redis_url: str, queue: str, conn: echomq.Connection
) -> None:
    """An id that exists anywhere in the tree refuses the whole call: nothing is written."""
    _q, t = make_app(queue, redis_url)
    await jobs.enqueue(conn, queue, b"x", job_id="taken")
    before = await snapshot(conn, Keyspace(queue))
    tree = echomq.chord([t["add"].s(1), t["add"].s(2).set(job_id="taken")], t["total"].s())
    with pytest.raises(echomq.DuplicateJob):
        await flows.add_flow(conn, tree.flow_jobs())
    assert await snapshot(conn, Keyspace(queue)) == before
    # a page naming a parent that is not a held waiting parent: refused, nothing written
    [orphan] = echomq.group(t["add"].s(1)).flow_jobs()
    fake = flows.FlowJob(job=orphan.job, queue=queue)
    parent = flows.FlowJob(job=orphan.job.__class__(payload=b"p", job_id="taken"), queue=queue)
    calls = flows.add_flow_calls([flows.FlowJob(job=parent.job, queue=queue, children=(fake,))])
    argv = list(calls[0].argv)
    # drop the parent's own node: the child then names an outside parent ("taken": pending)
    child_only = [argv[0], 1, 0, *argv[3 + 17 :]]
    from echomq._scripts.calls import evaluate, script_call

    with pytest.raises(FlowStateError):
        await evaluate(conn, script_call("add_flow", calls[0].keys, child_only, lambda r: r))
    assert await snapshot(conn, Keyspace(queue)) == before


async def test_a_big_chord_is_added_in_pages_and_runs_once(
    redis_url: str, queue: str, conn: echomq.Connection
) -> None:
    """600 members: three pages; the callback is held until the last one, then runs once."""
    q, t = make_app(queue, redis_url)
    tree = echomq.chord([t["add"].s(i) for i in range(600)], t["total"].s())
    roots = tree.flow_jobs()
    calls = flows.add_flow_calls(roots)
    assert len(calls) == 3
    from echomq._scripts.calls import evaluate

    await evaluate(conn, calls[0])
    root = roots[0].id
    info = await jobs.get_job(conn, queue, root)
    assert info is not None and info.state == "waiting"
    kids = await flows.children(conn, queue, root)
    assert kids.held and kids.open == 250 and kids.kids == 249
    async with running(q):
        # the first page's children run and finish (their completions are settled in
        # batches: wait for the parent's count, not the runs): the held callback waits
        async def first_page_done() -> bool:
            return (await flows.children(conn, queue, root)).open == 1

        await until(first_page_done)
        kids = await flows.children(conn, queue, root)
        assert kids.open == 1 and kids.held and t["ran"].get("add", 0) == 249
        for call in calls[1:]:
            await evaluate(conn, call)
        with trio.fail_after(LIMIT):
            assert await q.handle(root).result() == sum(range(600))
    assert t["ran"] == {"add": 600, "total": 1}


async def test_remove_refuses_a_parent_with_open_children(
    redis_url: str, queue: str, conn: echomq.Connection
) -> None:
    _q, t = make_app(queue, redis_url)
    tree = echomq.flow(
        t["collect"].s(), [echomq.flow(t["collect"].s(), [t["add"].s(1)]), t["add"].s(2)]
    )
    [root] = tree.flow_jobs()
    await flows.add_flow(conn, [root])
    before = await snapshot(conn, Keyspace(queue))
    with pytest.raises(HasOpenChildren):
        await jobs.remove_job(conn, queue, root.id)
    assert await snapshot(conn, Keyspace(queue)) == before
    assert await flows.remove_flow(conn, queue, root.id) == 4
    assert await snapshot(conn, Keyspace(queue)) == {
        k: v
        for k, v in before.items()
        if b"job:" not in k and not k.endswith((b"pending", b"waiting"))
    }


async def test_removing_a_child_stops_its_parent_waiting(
    redis_url: str, queue: str, conn: echomq.Connection
) -> None:
    """A removed child counts as failed for its parent's policy (ignore: the parent runs)."""
    _q, t = make_app(queue, redis_url)
    [root] = echomq.flow(t["collect"].s(), [t["add"].s(1)], policy="ignore").flow_jobs()
    await flows.add_flow(conn, [root])
    await jobs.remove_job(conn, queue, root.children[0].id)
    info = await jobs.get_job(conn, queue, root.id)
    assert info is not None and info.state == "pending"
    kids = await flows.children(conn, queue, root.id)
    assert kids.open == 0 and kids.failed == 1 and kids.outcomes[0].state == "removed"  # type: ignore[union-attr]


async def test_reprocess_of_a_dead_child_reopens_the_parents_wait(
    redis_url: str, queue: str, conn: echomq.Connection
) -> None:
    """The dead child failed its parent and the root; reprocessing it re-opens both."""
    q, t = make_app(queue, redis_url)
    ok = {"now": False}

    @q.task(name="maybe")
    async def maybe() -> int:
        if not ok["now"]:
            raise RuntimeError("not yet")
        return 5

    handle = None
    async with running(q):
        handle = await echomq.chain(maybe.s(), t["add"].s(1), t["add"].s(2)).apply()
        with trio.fail_after(LIMIT), pytest.raises(echomq.JobFailed):
            await handle.result()
        [root] = [handle.id]
        middle = (await flows.children(conn, queue, root)).ids[0]
        leaf = (await flows.children(conn, queue, middle)).ids[0]
        for job_id in (root, middle, leaf):
            info = await jobs.get_job(conn, queue, job_id)
            assert info is not None and info.state == "dead"
        explained = await jobs.explain(conn, queue, root)
        assert explained.state == "dead"
        ok["now"] = True
        await jobs.reprocess_job(conn, queue, leaf)
        with trio.fail_after(LIMIT):
            while True:  # the reprocessed leaf runs, then the middle and the root
                info = await jobs.get_job(conn, queue, root)
                if info is not None and info.state == "completed":
                    break
                await trio.sleep(0.01)
        assert await q.handle(root).result() == 8


async def test_explain_and_status_know_waiting_parents(
    redis_url: str, queue: str, conn: echomq.Connection
) -> None:
    _q, t = make_app(queue, redis_url)
    [root] = echomq.chord([t["add"].s(i) for i in range(5)], t["total"].s()).flow_jobs()
    await flows.add_flow(conn, [root])
    stats = await admin.stats(conn, queue)
    assert stats.waiting == 1 and stats.pending == 5
    explained = await jobs.explain(conn, queue, root.id)
    from echomq.cli.explain_text import summary

    text = summary(explained)
    assert "waiting for 5 of 5 children" in text
    assert root.children[0].id in text


async def test_a_flow_parent_in_a_group_becomes_ready_in_its_lane(
    conn: echomq.Connection, queue: str
) -> None:
    """The parent's last child finishes: the parent goes to its group's lane through the
    `ready` include (docs/lanes.md), not to the flat pending set; a grouped leaf too."""
    ks = Keyspace(queue)

    def job(job_id: str, group: str | None = None) -> jobs.NewJob:
        return jobs.NewJob(payload=b"x", job_id=job_id, group=group)

    tree = flows.FlowJob(
        job=job("P", "g1"),
        queue=queue,
        children=(flows.FlowJob(job=job("C", "g2"), queue=queue),),
    )
    await flows.add_flow(conn, [tree])
    assert await conn.execute("ZSCORE", ks.lane("g2"), "C") is not None
    assert await conn.execute("ZSCORE", ks.pending, "C") is None
    [c] = await jobs.claim(conn, queue, 60_000)
    assert c.id == "C"
    await jobs.complete(conn, queue, c.id, c.token, b"1")
    assert await conn.execute("ZSCORE", ks.lane("g1"), "P") is not None
    assert await conn.execute("ZSCORE", ks.pending, "P") is None
    [p] = await jobs.claim(conn, queue, 60_000)
    assert p.id == "P"
