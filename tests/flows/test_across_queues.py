"""A child on another queue (docs/flows.md "Across queues"): its finish writes its own
queue's outbox; the sweeper relays it to the parent's queue with flow_notify, idempotent
per child, acknowledging only after the parent's script answered. Run on one server and
on the local cluster (the two queues' keys in different hash tags)."""

from __future__ import annotations

import pytest
import trio

import echomq
from echomq import flows, jobs
from echomq._scripts.calls import evaluate
from echomq._scripts.keyspace import Keyspace
from echomq._scripts.replies import FlowNotice

from ._app import make_app, running, until

LIMIT = 15


async def row(conn: echomq.Connection, queue: str, job_id: str, *fields: str) -> list[str | None]:
    got = await conn.execute("HMGET", Keyspace(queue).job(job_id), *fields)
    return [None if v is None else v.decode() for v in got]


async def test_a_chord_whose_members_run_on_another_queue(redis_url: str, queue: str) -> None:
    """The members on queue B, the callback on A: the callback runs once, after every
    member, with their results; the outbox is empty afterwards. No sweep runs after the
    first (the interval is a minute): the finishes' nudges on the workers' channel relay."""
    qa, ta = make_app(queue, redis_url)
    qb, tb = make_app(queue + "-b", redis_url)
    async with running(qa, recovery_interval=60), running(qb, recovery_interval=60):
        canvas = echomq.chord([tb["add"].s(i, 10) for i in range(5)], ta["total"].s())
        handle = await canvas.apply()
        with trio.fail_after(LIMIT):
            assert await handle.result() == 60
        outbox = Keyspace(qb.name).outbox
        await until(lambda: _drained(qb.connection, outbox))
    assert tb["ran"] == {"add": 5} and ta["ran"] == {"total": 1}


async def _drained(conn: echomq.Connection, outbox: str) -> bool:
    pending = await conn.execute("XPENDING", outbox, flows.RELAY_GROUP)
    return int(await conn.execute("XLEN", outbox)) == 0 and int(pending[0]) == 0


async def test_a_dead_relays_entry_is_relayed_again_once(redis_url: str, queue: str) -> None:
    """A relay read the entry and died before acknowledging it: the next relay claims it
    once it idled, tells the parent, and a repeat of the notice changes nothing."""
    qa, ta = make_app(queue, redis_url)
    qb, tb = make_app(queue + "-b", redis_url)
    b = qb.name
    async with qa.open(), qb.open():
        conn = qa.connection
        flow = echomq.flow(ta["collect"].s().set(job_id="P"), [tb["add"].s(1).set(job_id="C")])
        assert await flows.add_flow(conn, flow.flow_jobs()) == 2
        assert await row(conn, queue, "P", "state", "open", "kids") == ["waiting", "1", "1"]
        assert await row(conn, b, "C", "parent", "parent_queue") == ["P", queue]
        [c] = await jobs.claim(conn, b, 60_000)
        await jobs.complete(conn, b, c.id, c.token, b"1")
        outbox = Keyspace(b).outbox
        await conn.execute("XGROUP", "CREATE", outbox, flows.RELAY_GROUP, "0")
        taken = await conn.execute(
            "XREADGROUP", "GROUP", flows.RELAY_GROUP, "dead", "STREAMS", outbox, ">"
        )
        assert len(taken[0][1]) == 1  # the dead relay holds it, unacknowledged
        assert await flows.relay_outbox(conn, b, "alive", idle_ms=60_000) == 0
        assert await row(conn, queue, "P", "state") == ["waiting"]
        assert await flows.relay_outbox(conn, b, "alive", idle_ms=0) == 1
        assert await row(conn, queue, "P", "state", "open") == ["pending", "0"]
        again = flows.flow_notify_call(queue, "P", "C", "completed", b"1")
        assert await evaluate(conn, again) is FlowNotice.ALREADY
        assert await row(conn, queue, "P", "open") == ["0"]
        assert await _drained(conn, outbox)
        assert await flows.relay_outbox(conn, b, "alive", idle_ms=0) == 0
    async with running(qa):
        with trio.fail_after(LIMIT):
            assert await qa.handle("P").result() == [1]


async def test_the_sweeper_relays_a_dead_relays_entry(redis_url: str, queue: str) -> None:
    """The same, end to end: the entry a dead consumer holds is relayed by a worker's
    sweeper on the child's queue (10 recovery intervals of idleness)."""
    qa, ta = make_app(queue, redis_url)
    qb, tb = make_app(queue + "-b", redis_url)
    b = qb.name
    async with qa.open(), qb.open():
        conn = qa.connection
        flow = echomq.flow(ta["collect"].s().set(job_id="P"), [tb["add"].s(2).set(job_id="C")])
        await flows.add_flow(conn, flow.flow_jobs())
        [c] = await jobs.claim(conn, b, 60_000)
        await jobs.complete(conn, b, c.id, c.token, b"2")
        outbox = Keyspace(b).outbox
        await conn.execute("XGROUP", "CREATE", outbox, flows.RELAY_GROUP, "0")
        await conn.execute("XREADGROUP", "GROUP", flows.RELAY_GROUP, "dead", "STREAMS", outbox, ">")
    async with running(qa), running(qb, recovery_interval=0.02):
        with trio.fail_after(LIMIT):
            assert await qa.handle("P").result() == [2]
    assert tb["ran"] == {} and ta["ran"] == {"collect": 1}


async def test_a_removed_child_on_another_queue_tells_its_parent(
    redis_url: str, queue: str
) -> None:
    """remove_job of a live child writes `removed` to its outbox; under policy ignore the
    parent then runs on the others."""
    qa, ta = make_app(queue, redis_url)
    qb, tb = make_app(queue + "-b", redis_url)
    async with qa.open(), qb.open():
        conn = qa.connection
        flow = echomq.flow(
            ta["collect"].s().set(job_id="P"),
            [tb["add"].s(1).set(job_id="C1"), ta["add"].s(2).set(job_id="C2")],
            policy="ignore",
        )
        await flows.add_flow(conn, flow.flow_jobs())
        await jobs.remove_job(conn, qb.name, "C1")
        assert await flows.relay_outbox(conn, qb.name, "r", idle_ms=0) == 1
        assert await row(conn, queue, "P", "open", "failed") == ["1", "1"]
    async with running(qa):
        with trio.fail_after(LIMIT):
            assert await qa.handle("P").result() == [2]


@pytest.mark.single_node("no I/O")
def test_queues_above_and_below_one_another_are_added_parents_first(
    closed_port_url: str,
) -> None:
    """A on top, B below it, A again below B: the calls go by hops down the tree (A, then
    B, then A again), each parent and its stubs before its children on other queues."""
    ta = make_app("qa", closed_port_url)[1]
    tb = make_app("qb", closed_port_url)[1]
    canvas = echomq.flow(
        ta["collect"].s().set(job_id="R"),
        [echomq.flow(tb["collect"].s().set(job_id="M"), [ta["add"].s(1).set(job_id="L")])],
    )
    calls = flows.add_flow_calls(canvas.flow_jobs())
    assert [call.keys[0] for call in calls] == [
        Keyspace("qa").pending,
        Keyspace("qb").pending,
        Keyspace("qa").pending,
    ]
    ids = [[a for a in call.argv if a in ("R", "M", "L")][:1] for call in calls]
    assert ids == [["R"], ["M"], ["L"]]


async def test_queues_above_and_below_one_another_run(redis_url: str, queue: str) -> None:
    """R on A waits for M on B, which waits for L on A: each queue's workers relay their
    own outbox to the other; the root's result is its child's, its grandchild's."""
    qa, ta = make_app(queue, redis_url)
    qb, tb = make_app(queue + "-b", redis_url)
    async with running(qa), running(qb):
        canvas = echomq.flow(
            ta["collect"].s(),
            [echomq.flow(tb["collect"].s(), [ta["add"].s(1, 2), tb["add"].s(3)])],
        )
        handle = await canvas.apply()
        with trio.fail_after(LIMIT):
            assert await handle.result() == [[3, 3]]
    assert ta["ran"] == {"add": 1, "collect": 1} and tb["ran"] == {"add": 1, "collect": 1}


async def test_cancel_and_remove_of_a_flow_reach_its_children_on_other_queues(
    redis_url: str, queue: str
) -> None:
    """The parent lists where its remote children live (its `:remote` hash): cancel_flow
    cancels a pending child on its own queue; remove_flow removes the subtree there too."""
    qa, ta = make_app(queue, redis_url)
    qb, tb = make_app(queue + "-b", redis_url)
    b = qb.name
    async with qa.open(), qb.open():
        conn = qa.connection
        one = echomq.flow(ta["collect"].s().set(job_id="P1"), [tb["add"].s(1).set(job_id="C1")])
        two = echomq.flow(ta["collect"].s().set(job_id="P2"), [tb["add"].s(2).set(job_id="C2")])
        for canvas in (one, two):
            await flows.add_flow(conn, canvas.flow_jobs())
        assert await flows.remote_children(conn, queue, "P1") == {"C1": b}
        assert await flows.subtree(conn, queue, "P1") == [(b, "C1")]
        assert await flows.cancel_flow(conn, queue, "P1") == 2
        assert await jobs.get_job(conn, b, "C1") is None  # pending: cancelled = removed
        assert await flows.remove_flow(conn, queue, "P2") == 2
        assert await jobs.get_job(conn, b, "C2") is None
        assert await jobs.get_job(conn, queue, "P2") is None
        leftover = await conn.execute("EXISTS", Keyspace(queue).remote_children("P2"))
        assert leftover == 0


async def test_the_dashboards_tree_reads_a_remote_child_on_its_queue(
    redis_url: str, queue: str
) -> None:
    """The Flows panel's read: the parent on A, its child's state read on B."""
    from echomq.dashboard.flow_view import read_flow

    qa, ta = make_app(queue, redis_url)
    qb, tb = make_app(queue + "-b", redis_url)
    async with qa.open(), qb.open():
        conn = qa.connection
        canvas = echomq.flow(
            ta["collect"].s().set(job_id="P"),
            [tb["add"].s(1).set(job_id="C1"), ta["add"].s(2).set(job_id="C2")],
        )
        await flows.add_flow(conn, canvas.flow_jobs())
        view = await read_flow(conn, queue, "P")
    assert view["waiting"] == ["P"]
    tree = view["tree"]
    assert (tree["state"], tree["open"], tree["kids"]) == ("waiting", 2, 2)
    assert [(c["id"], c["queue"], c["state"]) for c in tree["children"]] == [
        ("C1", qb.name, "pending"),
        ("C2", queue, "pending"),
    ]


async def test_a_group_whose_members_are_on_two_queues(redis_url: str, queue: str) -> None:
    """No parent: each member's handle reads its own queue; result() in order."""
    qa, ta = make_app(queue, redis_url)
    qb, tb = make_app(queue + "-b", redis_url)
    async with running(qa), running(qb):
        handle = await echomq.group(ta["add"].s(1), tb["add"].s(2), ta["add"].s(3)).apply()
        with trio.fail_after(LIMIT):
            assert await handle.result() == [1, 2, 3]
    assert ta["ran"] == {"add": 2} and tb["ran"] == {"add": 1}


async def test_explain_reads_a_remote_childs_state_on_its_queue(redis_url: str, queue: str) -> None:
    """explain of a parent names each open child on another queue with its state there
    (one finished but not relayed yet: on its way through the outbox); explain of such a
    child names its parent on the other queue."""
    from echomq.cli.explain_text import facts, summary

    qa, ta = make_app(queue, redis_url)
    qb, tb = make_app(queue + "-b", redis_url)
    b = qb.name
    async with qa.open(), qb.open():
        conn = qa.connection
        canvas = echomq.flow(
            ta["collect"].s().set(job_id="P"),
            [
                tb["add"].s(1).set(job_id="C1"),
                tb["add"].s(2).set(job_id="C2"),
                ta["add"].s(3).set(job_id="C3"),
            ],
        )
        await flows.add_flow(conn, canvas.flow_jobs())
        [c] = await jobs.claim(conn, b, 60_000)  # C1 first: completed, not relayed
        await jobs.complete(conn, b, c.id, c.token, b"1")
        [c2] = await jobs.claim(conn, b, 60_000)  # C2: running
        parent = await jobs.explain(conn, queue, "P")
        child = await jobs.explain(conn, b, "C2")
    assert [(k.id, k.queue, k.remote, k.state) for k in parent.waiting_for] == [
        ("C1", b, True, "completed"),
        ("C2", b, True, "active"),
        ("C3", queue, False, "pending"),
    ]
    text = summary(parent)
    assert text.startswith("a flow parent waiting for 3 of 3 children: ")
    assert f"C1 (on {b}: completed; its outcome is on its way through {b}'s outbox)" in text
    assert f"C2 (on {b}: active), C3;" in text
    assert ("flow children", "3 open of 3, 0 failed") in facts(parent)
    assert (child.parent, child.parent_queue, c2.id) == ("P", queue, "C2")
    named = dict(facts(child))["flow parent"]
    assert named == f"P on queue {queue} (told through this queue's outbox)"


async def test_an_entry_the_parents_queue_refuses_is_set_aside_not_blocking(
    redis_url: str, queue: str
) -> None:
    """An outbox entry whose flow_notify keeps failing (here its parent's key holds a
    string: WRONGTYPE) does not hold up the entries after it; it is tried again, and after
    MAX_RELAY_TRIES deliveries it is copied with the refusal to outbox:dead and removed."""
    qa, ta = make_app(queue, redis_url)
    qb, tb = make_app(queue + "-b", redis_url)
    b = qb.name
    async with qa.open(), qb.open():
        conn = qa.connection
        await conn.execute("SET", Keyspace(queue).job("X"), "not a hash")
        outbox = Keyspace(b).outbox
        await conn.execute(
            "XADD", outbox, "*", "parent_queue", queue, "parent", "X", "child", "Y",
            "state", "completed", "value", "1", "gen", "0",
        )  # fmt: skip
        flow = echomq.flow(ta["collect"].s().set(job_id="P"), [tb["add"].s(1).set(job_id="C")])
        await flows.add_flow(conn, flow.flow_jobs())
        [c] = await jobs.claim(conn, b, 60_000)
        await jobs.complete(conn, b, c.id, c.token, b"1")
        assert await flows.relay_outbox(conn, b, "r", idle_ms=0) == 1  # C's, after the bad one
        assert await row(conn, queue, "P", "state") == ["pending"]
        for _ in range(flows.MAX_RELAY_TRIES - 2):  # handed back each time, still refused
            assert await flows.relay_outbox(conn, b, "r", idle_ms=0) == 0
            assert await conn.execute("XLEN", outbox) == 1
        assert await flows.relay_outbox(conn, b, "r", idle_ms=0) == 0  # the last try
        assert await _drained(conn, outbox)
        [(_, raw)] = await conn.execute("XRANGE", Keyspace(b).outbox_dead, "-", "+")
        aside = dict(zip(raw[::2], raw[1::2], strict=True))
        assert aside[b"child"] == b"Y" and aside[b"tries"] == str(flows.MAX_RELAY_TRIES).encode()
        assert b"WRONGTYPE" in aside[b"error"]
