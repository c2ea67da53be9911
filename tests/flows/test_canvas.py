"""chain, group, chord and flow trees run on a real worker (docs/flows.md)."""

from __future__ import annotations

import pytest
import trio

import echomq
from echomq import flows, jobs
from echomq.errors import InvalidArgument, JobFailed, SerializationError

from ._app import make_app, running, until

LIMIT = 10


async def test_a_chain_passes_each_result_on(redis_url: str, queue: str) -> None:
    """chain(a(1, 2), b(+10), c(+100)): each step gets the previous result first."""
    q, t = make_app(queue, redis_url)
    async with running(q):
        handle = await echomq.chain(t["add"].s(1, 2), t["add"].s(10), t["add"].s(100)).apply()
        with trio.fail_after(LIMIT):
            assert await handle.result() == 113
    assert t["ran"]["add"] == 3


async def test_a_group_answers_its_results_in_order(redis_url: str, queue: str) -> None:
    q, t = make_app(queue, redis_url)
    async with running(q):
        handle = await echomq.group(*(t["add"].s(i, i) for i in range(6))).apply()
        with trio.fail_after(LIMIT):
            assert await handle.result() == [0, 2, 4, 6, 8, 10]


async def test_a_chord_calls_back_once_with_every_result(redis_url: str, queue: str) -> None:
    q, t = make_app(queue, redis_url)
    async with running(q):
        members = echomq.group(*(t["add"].s(i) for i in range(20)))
        handle = await echomq.chord(members, t["total"].s(extra=1000)).apply()
        with trio.fail_after(LIMIT):
            assert await handle.result() == sum(range(20)) + 1000
    assert t["ran"] == {"add": 20, "total": 1}


async def test_a_tree_of_three_levels_reads_its_children(redis_url: str, queue: str) -> None:
    """flow(collect, [flow(collect, [add, add]), chain(add, add)]) reads children in order."""
    q, t = make_app(queue, redis_url)
    async with running(q):
        tree = echomq.flow(
            t["collect"].s(),
            [
                echomq.flow(t["collect"].s(), [t["add"].s(1), t["add"].s(2)]),
                echomq.chain(t["add"].s(3), t["add"].s(4)),
                t["add"].s(5),
            ],
        )
        handle = await tree.apply()
        with trio.fail_after(LIMIT):
            assert await handle.result() == [[1, 2], 7, 5]


async def test_policy_fail_dead_letters_the_parent(redis_url: str, queue: str) -> None:
    """A dead child fails its parent (the default), and the root above it."""
    q, t = make_app(queue, redis_url)
    async with running(q):
        handle = await echomq.chain(t["boom"].s(), t["add"].s(1), t["add"].s(2)).apply()
        with trio.fail_after(LIMIT), pytest.raises(JobFailed) as failed:
            await handle.result()
    assert "ChildFailed" in str(failed.value) and "boom" in str(failed.value)
    assert "add" not in t["ran"]  # neither step ran


async def test_policy_ignore_and_continue(redis_url: str, queue: str) -> None:
    q, t = make_app(queue, redis_url)
    async with running(q):
        kids = [t["add"].s(1), t["boom"].s(), t["add"].s(2)]
        ignore = await echomq.flow(t["collect"].s(), kids, policy="ignore").apply()
        cont = await echomq.flow(t["collect"].s(), kids, policy="continue").apply()
        with trio.fail_after(LIMIT):
            assert await ignore.result() == [1, 2]
            got = await cont.result()
    assert got[0] == 1 and got[2] == 2
    assert got[1].startswith("child ") and "dead: ValueError: boom" in got[1]


async def test_a_childs_retry_does_not_rerun_its_siblings(redis_url: str, queue: str) -> None:
    q, t = make_app(queue, redis_url)
    tries = {"n": 0}

    @q.task(name="flaky", max_attempts=3, backoff=0)
    async def flaky() -> int:
        tries["n"] += 1
        if tries["n"] < 3:
            raise RuntimeError("again")
        return 10

    async with running(q):
        handle = await echomq.chord(
            [t["add"].s(1), flaky.s(), t["add"].s(2)], t["total"].s()
        ).apply()
        with trio.fail_after(LIMIT):
            assert await handle.result() == 13
    assert tries["n"] == 3 and t["ran"]["add"] == 2 and t["ran"]["total"] == 1


async def test_cancel_of_a_flow_cancels_its_open_children(redis_url: str, queue: str) -> None:
    q, t = make_app(queue, redis_url)
    async with running(q) as worker:
        handle = await echomq.chord([t["slow"].s(i) for i in range(3)], t["total"].s()).apply()
        conn = q.connection
        with trio.fail_after(LIMIT):
            await until(lambda: t["ran"].get("slow", 0) == 3)
            assert await handle.cancel("stop") == 4  # the callback removed, 3 signalled
            with pytest.raises(echomq.JobCancelled):
                await handle.result()
            await until(lambda: worker.statistics().cancelled == 3)
        assert await jobs.get_job(conn, queue, handle.id) is None
    assert "total" not in t["ran"]


def test_bad_canvases_are_refused_before_any_io(closed_port_url: str) -> None:
    """An empty group, a step that is not a task, a cycle, arguments that cannot be encoded."""
    _q, t = make_app("bad", closed_port_url)
    with pytest.raises(InvalidArgument, match="empty group"):
        echomq.group()
    with pytest.raises(InvalidArgument, match="task signature"):
        echomq.chain(t["add"].s(1), print)
    with pytest.raises(InvalidArgument, match="task signature"):
        echomq.chord([t["add"].s(1)], 5)
    node = echomq.flow(t["collect"].s(), [])
    node.children.append(node)
    with pytest.raises(InvalidArgument, match="cycle"):
        node.flow_jobs()
    with pytest.raises(SerializationError):
        echomq.chain(t["add"].s(object()), t["add"].s()).flow_jobs()
    with pytest.raises(InvalidArgument, match="policy"):
        echomq.group(t["add"].s(1), policy="maybe")
    with pytest.raises(echomq.DuplicateJob):
        flows.add_flow_calls(
            echomq.chain(t["add"].s(1).set(job_id="x"), t["add"].s().set(job_id="x")).flow_jobs()
        )
