"""Reprocess of a dead child whose parent is on another queue (docs/flows.md "Across
queues"): the child's queue writes an outbox entry `reopen` with the child's next
generation, relayed to flow_notify on the parent's queue, which re-opens the parent's wait
as reprocess_job does on one queue; flow_notify orders and deduplicates a child's entries
by generation. Run on one server and on the local cluster (each queue in its own slot)."""

from __future__ import annotations

from typing import Any

import pytest
import trio

import echomq
from echomq import flows, jobs
from echomq._scripts.calls import evaluate
from echomq._scripts.keyspace import Keyspace
from echomq._scripts.replies import FlowNotice
from echomq._wire.hashslots import key_slot

from ._app import make_app, running, until
from .test_across_queues import row

LIMIT = 15
TOLD, ALREADY = FlowNotice.TOLD, FlowNotice.ALREADY


def two_queues(queue: str, url: str) -> tuple[Any, Any, Any, Any]:
    qa, ta = make_app(queue, url)
    qb, tb = make_app(queue + "-b", url)
    assert key_slot(Keyspace(qa.name).base) != key_slot(Keyspace(qb.name).base)
    return qa, ta, qb, tb


def flaky(q: echomq.Queue, ok: dict[str, bool]) -> Any:
    @q.task(name="maybe")
    async def maybe(x: int) -> int:
        if not ok["now"]:
            raise RuntimeError("not yet")
        return x

    return maybe


async def state(conn: echomq.Connection, queue: str, job_id: str) -> str | None:
    return (await row(conn, queue, job_id, "state"))[0]


async def test_flow_notify_orders_a_childs_entries_by_generation(
    redis_url: str, queue: str
) -> None:
    """Entries relayed late, twice, or out of order: an outcome of an older generation
    changes nothing, a reopen counts once, and a newer outcome before its reopen is
    applied as if the reopen had come first."""
    qa, ta, qb, tb = two_queues(queue, redis_url)
    async with qa.open(), qb.open():
        conn = qa.connection
        flow = echomq.flow(ta["collect"].s().set(job_id="P"), [tb["add"].s(1).set(job_id="C")])
        await flows.add_flow(conn, flow.flow_jobs())

        async def notify(state: str, gen: int, value: bytes = b"") -> FlowNotice:
            return await evaluate(conn, flows.flow_notify_call(queue, "P", "C", state, value, gen))

        async def parent() -> list[str | None]:
            return await row(conn, queue, "P", "state", "open", "failed")

        remote = Keyspace(queue).remote_children("P")
        assert await notify("dead", 0, b"boom") is TOLD  # policy fail: P made ready
        assert await parent() == ["pending", "0", "1"]
        assert await notify("completed", 1, b"7") is TOLD  # before its reopen
        assert await parent() == ["pending", "0", "0"]
        assert await conn.execute("HGET", remote, "C") == f"{qb.name}#1".encode()
        assert await notify("reopen", 1) is ALREADY
        assert await notify("dead", 0, b"boom") is ALREADY
        assert await notify("completed", 1, b"7") is ALREADY
        assert await parent() == ["pending", "0", "0"]
        assert await notify("reopen", 2) is TOLD  # reprocessed again: P waits again
        assert await parent() == ["waiting", "1", "0"]
        assert await notify("reopen", 2) is ALREADY
        assert await notify("completed", 1, b"7") is ALREADY
        assert await parent() == ["waiting", "1", "0"]
        assert await notify("reopen", 3) is TOLD  # no outcome recorded: nothing to take back
        assert await parent() == ["waiting", "1", "0"]
        assert await notify("completed", 3, b"9") is TOLD
        assert await parent() == ["pending", "0", "0"]
        assert await flows.remote_children(conn, queue, "P") == {"C": qb.name}
    async with running(qa):
        with trio.fail_after(LIMIT):
            assert await qa.handle("P").result() == [9]


async def test_a_reopen_leaves_a_running_parent_alone(redis_url: str, queue: str) -> None:
    """As reprocess_job on one queue: a parent already claimed keeps its children's
    outcomes, and the re-run child's newer outcome is not recorded either."""
    qa, ta, qb, tb = two_queues(queue, redis_url)
    async with qa.open(), qb.open():
        conn = qa.connection
        flow = echomq.flow(ta["collect"].s().set(job_id="P"), [tb["add"].s(1).set(job_id="C")])
        await flows.add_flow(conn, flow.flow_jobs())
        call = flows.flow_notify_call
        assert await evaluate(conn, call(queue, "P", "C", "dead", b"x", 0)) is TOLD
        [p] = await jobs.claim(conn, queue, 60_000)
        assert p.id == "P"
        assert await evaluate(conn, call(queue, "P", "C", "reopen", b"", 1)) is TOLD
        assert await evaluate(conn, call(queue, "P", "C", "completed", b"1", 1)) is ALREADY
        assert await row(conn, queue, "P", "state", "open", "failed") == ["active", "0", "1"]


async def test_reprocess_of_a_dead_remote_child_reopens_its_parent(
    redis_url: str, queue: str
) -> None:
    """The child on B dies, its parent on A fails on it (policy fail); reprocessing the
    child re-opens the parent's wait through B's outbox, and the parent runs once on the
    re-run child's result."""
    qa, ta, qb, _tb = two_queues(queue, redis_url)
    ok = {"now": False}
    maybe = flaky(qb, ok)
    async with running(qa), running(qb):
        conn = qa.connection
        canvas = echomq.flow(
            ta["collect"].s().set(job_id="P"),
            [maybe.s(5).set(job_id="C"), ta["add"].s(1).set(job_id="S")],
        )
        handle = await canvas.apply()
        with trio.fail_after(LIMIT), pytest.raises(echomq.JobFailed):
            await handle.result()
        assert await state(conn, qb.name, "C") == "dead"
        await until(lambda: _dead_with(conn, queue, "P"))
        ok["now"] = True
        await jobs.reprocess_job(conn, qb.name, "C")
        assert await row(conn, qb.name, "C", "gen") == ["1"]
        await until(lambda: _completed(conn, queue, "P"), LIMIT)
        assert await qa.handle("P").result() == [5, 1]
    assert ta["ran"] == {"add": 1, "collect": 1}


async def _completed(conn: echomq.Connection, queue: str, job_id: str) -> bool:
    return await state(conn, queue, job_id) == "completed"


async def _dead_with(conn: echomq.Connection, queue: str, job_id: str) -> bool:
    return await row(conn, queue, job_id, "state", "open", "failed") == ["dead", "0", "1"]


async def test_reprocess_reopens_ancestors_across_queues_above_and_below(
    redis_url: str, queue: str
) -> None:
    """R on A over M on B over L on A, policy fail: L's death fails M, M's fails R.
    Reprocessing L re-opens M on B (A's outbox), whose re-open re-opens R on A (B's
    outbox, M's own generation); then L, M and R run, each once more."""
    qa, ta, qb, tb = two_queues(queue, redis_url)
    ok = {"now": False}
    maybe = flaky(qa, ok)
    async with running(qa), running(qb):
        conn = qa.connection
        canvas = echomq.flow(
            ta["collect"].s().set(job_id="R"),
            [echomq.flow(tb["collect"].s().set(job_id="M"), [maybe.s(4).set(job_id="L")])],
        )
        handle = await canvas.apply()
        with trio.fail_after(LIMIT), pytest.raises(echomq.JobFailed):
            await handle.result()
        await until(lambda: _dead_with(conn, qb.name, "M"))
        ok["now"] = True
        await jobs.reprocess_job(conn, queue, "L")
        await until(lambda: _completed(conn, queue, "R"), LIMIT)
        assert await qa.handle("R").result() == [[4]]
        assert await row(conn, queue, "L", "gen") == ["1"]
        assert await row(conn, qb.name, "M", "gen") == ["1"]
    assert ta["ran"] == {"collect": 1} and tb["ran"] == {"collect": 1}


async def test_a_removed_child_after_a_reprocess_counts_once(redis_url: str, queue: str) -> None:
    """The removed entry carries the child's generation: relayed after the reopen it is
    recorded (policy ignore: the parent runs on its other child); a stale dead is not."""
    qa, ta, qb, tb = two_queues(queue, redis_url)
    b = qb.name
    async with qa.open(), qb.open():
        conn = qa.connection
        flow = echomq.flow(
            ta["collect"].s().set(job_id="P"),
            [tb["add"].s(1).set(job_id="C"), ta["add"].s(2).set(job_id="S")],
            policy="ignore",
        )
        await flows.add_flow(conn, flow.flow_jobs())
        [c] = await jobs.claim(conn, b, 60_000)
        await jobs.fail(conn, b, c.id, c.token, "boom", dead=True)
        assert await state(conn, b, "C") == "dead"
        assert await flows.relay_outbox(conn, b, "r", idle_ms=0) == 1
        assert await row(conn, queue, "P", "open", "failed") == ["1", "1"]
        await jobs.reprocess_job(conn, b, "C")
        await jobs.remove_job(conn, b, "C")
        assert await flows.relay_outbox(conn, b, "r", idle_ms=0) == 2
        assert await row(conn, queue, "P", "open", "failed") == ["1", "1"]
        kids = await flows.children(conn, queue, "P")
        assert kids.outcomes[0] is not None and kids.outcomes[0].state == "removed"
        again = flows.flow_notify_call(queue, "P", "C", "dead", b"boom", 0)
        assert await evaluate(conn, again) is ALREADY
    async with running(qa):
        with trio.fail_after(LIMIT):
            assert await qa.handle("P").result() == [2]


async def test_a_reopen_redelivered_after_the_reruns_outcome_changes_nothing(
    redis_url: str, queue: str
) -> None:
    """The hazard the generation closes: a relay took the `reopen` and died; the re-run
    child's `completed` is relayed first (applied as if its reopen had come), then the
    `reopen` is claimed again: the parent does not wait again for a finished child."""
    qa, ta, qb, tb = two_queues(queue, redis_url)
    b = qb.name
    async with qa.open(), qb.open():
        conn = qa.connection
        flow = echomq.flow(ta["collect"].s().set(job_id="P"), [tb["add"].s(1).set(job_id="C")])
        await flows.add_flow(conn, flow.flow_jobs())
        [c] = await jobs.claim(conn, b, 60_000)
        await jobs.fail(conn, b, c.id, c.token, "boom", dead=True)
        assert await flows.relay_outbox(conn, b, "alive", idle_ms=0) == 1
        assert await row(conn, queue, "P", "state", "open", "failed") == ["pending", "0", "1"]
        await jobs.reprocess_job(conn, b, "C")
        outbox = Keyspace(b).outbox
        taken = await conn.execute(
            "XREADGROUP", "GROUP", flows.RELAY_GROUP, "dead", "STREAMS", outbox, ">"
        )
        assert [e[1][e[1].index(b"state") + 1] for e in taken[0][1]] == [b"reopen"]
        [c] = await jobs.claim(conn, b, 60_000)
        await jobs.complete(conn, b, c.id, c.token, b"7")
        assert await flows.relay_outbox(conn, b, "alive", idle_ms=60_000) == 1  # completed
        assert await row(conn, queue, "P", "state", "open", "failed") == ["pending", "0", "0"]
        assert await flows.relay_outbox(conn, b, "alive", idle_ms=0) == 1  # the reopen, late
        assert await row(conn, queue, "P", "state", "open", "failed") == ["pending", "0", "0"]
    async with running(qa):
        with trio.fail_after(LIMIT):
            assert await qa.handle("P").result() == [7]
