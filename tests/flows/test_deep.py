"""Flows of any depth (docs/flows.md "Depth"): nothing walks a canvas or a flow by
recursion, so a chain of chains or flows in flows 1,000 and 5,000 levels deep compiles,
is added, read (explain, the dashboard's tree) and cancelled, with no RecursionError and
no SerializationError blaming the arguments."""

from __future__ import annotations

from typing import Any

import pytest
import trio

import echomq
from echomq import flows, jobs
from echomq._scripts.keyspace import Keyspace
from echomq.canvas import Canvas
from echomq.dashboard.flow_view import read_flow

from ._app import make_app, running

DEPTHS = (1000, 5000)


def nested_flow(t: dict[str, Any], depth: int) -> Canvas:
    node: Canvas = t["add"].s(0)
    for _ in range(depth):
        node = echomq.flow(t["collect"].s(), [node])
    return node


def nested_chain(t: dict[str, Any], depth: int) -> Canvas:
    c = echomq.chain(t["add"].s(0))
    for _ in range(depth):
        c = echomq.chain(c, t["add"].s(1))
    return c


def levels(roots: list[flows.FlowJob]) -> int:
    """The tree's depth, walked with a list."""
    deepest, todo = 0, [(r, 1) for r in roots]
    while todo:
        node, d = todo.pop()
        deepest = max(deepest, d)
        todo += [(c, d + 1) for c in node.children]
    return deepest


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("shape", [nested_flow, nested_chain])
def test_a_deep_canvas_compiles_into_its_calls(
    closed_port_url: str, shape: Any, depth: int
) -> None:
    """No I/O: compiled, its add_flow pages built, its repr shallow."""
    _q, t = make_app("deep", closed_port_url)
    canvas = shape(t, depth)
    roots = canvas.flow_jobs()
    assert levels(roots) == depth + 1
    calls = flows.add_flow_calls(roots)
    assert len(calls) == -(-(depth + 1) // 250)  # pages of 250 nodes
    assert len(repr(canvas)) < 200 and len(repr(roots[0])) < 2000


def test_a_cycle_in_a_deep_canvas_is_refused(closed_port_url: str) -> None:
    _q, t = make_app("deep", closed_port_url)
    inner = echomq.group(t["add"].s(1))
    outer = echomq.flow(t["collect"].s(), [inner])
    for _ in range(2000):
        outer = echomq.flow(t["collect"].s(), [outer])
    inner.members.append(outer)
    with pytest.raises(echomq.InvalidArgument, match="contains itself"):
        outer.flow_jobs()


@pytest.mark.parametrize("depth", DEPTHS)
async def test_a_deep_flow_is_added_read_and_cancelled(
    redis_url: str, queue: str, depth: int
) -> None:
    q, t = make_app(queue, redis_url)
    async with q.open():
        conn = q.connection
        handle = await nested_flow(t, depth).apply()
        below = await flows.subtree(conn, queue, handle.id)
        assert len(below) == depth
        leaf = below[-1][1]
        assert (await jobs.get_job(conn, queue, leaf)).state.value == "pending"  # type: ignore[union-attr]
        explained = await jobs.explain(conn, queue, handle.id)
        assert explained.children == 1 and explained.open_children == 1
        assert (await jobs.explain(conn, queue, leaf)).state.value == "pending"
        view = await read_flow(conn, queue, handle.id)
        assert view["tree"]["id"] == handle.id and view["tree"]["kids"] == 1
        with trio.fail_after(120):
            assert await handle.cancel("deep") == depth + 1
        ks = Keyspace(queue)
        assert await conn.execute("ZCARD", ks.pending) == 0
        assert await conn.execute("ZCARD", ks.waiting) == 0
        assert await jobs.get_job(conn, queue, leaf) is None


async def test_a_chain_of_chains_a_thousand_deep_runs(redis_url: str, queue: str) -> None:
    """Each step fed the one before: 0 + 1 a thousand times."""
    q, t = make_app(queue, redis_url)
    async with running(q):
        handle = await nested_chain(t, 1000).apply()
        with trio.fail_after(120):
            assert await handle.result() == 1000
    assert t["ran"]["add"] == 1001
