"""A group in the middle of a chain (docs/flows.md): ``chain(a, group(b, c), d)`` runs b
and c each with a's result, then d with the list of theirs; one built-in job
(``echomq.group``) stands for the group. Run on one server and on the local cluster."""

from __future__ import annotations

import pytest
import trio

import echomq

from ._app import make_app, running

LIMIT = 15


async def test_a_group_mid_chain_gets_the_result_and_gives_a_list(
    redis_url: str, queue: str
) -> None:
    q, t = make_app(queue, redis_url)
    add, total = t["add"], t["total"]
    async with running(q):
        canvas = echomq.chain(add.s(1, 2), echomq.group(add.s(10), add.s(20)), total.s())
        handle = await canvas.apply()
        with trio.fail_after(LIMIT):
            assert await handle.result() == 13 + 23
    assert t["ran"] == {"add": 3, "total": 1}


async def test_a_group_last_in_a_chain_and_immutable_members(redis_url: str, queue: str) -> None:
    """chain(a, group(b, c.si())): the chain's result is the group's list; an immutable
    member is not given a's result."""
    q, t = make_app(queue, redis_url)
    add = t["add"]
    async with running(q):
        handle = await echomq.chain(add.s(5), echomq.group(add.s(1), add.si(7, 7))).apply()
        with trio.fail_after(LIMIT):
            assert await handle.result() == [6, 14]


async def test_two_groups_in_a_row(redis_url: str, queue: str) -> None:
    """chain(group(a, b), group(c, d), e): c and d each get [a, b]'s list."""
    q, t = make_app(queue, redis_url)
    add, total = t["add"], t["total"]
    async with running(q):
        canvas = echomq.chain(
            echomq.group(add.s(1), add.s(2)),
            echomq.group(total.s(), total.s(100)),
            total.s(),
        )
        handle = await canvas.apply()
        with trio.fail_after(LIMIT):
            assert await handle.result() == 3 + 103


async def test_members_on_another_queue(redis_url: str, queue: str) -> None:
    """The group's members on queue B (another hash tag): the group job on B spawns
    them there, the step after it on A hears of it through B's outbox."""
    qa, ta = make_app(queue, redis_url)
    qb, tb = make_app(queue + "-b", redis_url)
    async with running(qa, recovery_interval=60), running(qb, recovery_interval=60):
        canvas = echomq.chain(
            ta["add"].s(1), echomq.group(tb["add"].s(1), tb["add"].s(2)), ta["total"].s()
        )
        handle = await canvas.apply()
        with trio.fail_after(LIMIT):
            assert await handle.result() == 2 + 3
    assert tb["ran"] == {"add": 2}


async def test_a_failed_member_fails_the_chain(redis_url: str, queue: str) -> None:
    q, t = make_app(queue, redis_url)
    async with running(q):
        canvas = echomq.chain(
            t["add"].s(1), echomq.group(t["boom"].s(), t["add"].s(2)), t["total"].s()
        )
        handle = await canvas.apply()
        with trio.fail_after(LIMIT), pytest.raises(echomq.JobFailed, match="ChildFailed"):
            await handle.result()
    assert "total" not in t["ran"]


def test_a_chord_mid_chain_is_refused_before_any_io() -> None:
    q = echomq.Queue("q")

    @q.task
    async def s(x: object = None) -> object:
        return x

    with pytest.raises(echomq.errors.InvalidArgument, match="chain step 2"):
        echomq.chain(s.s(), echomq.chord([s.s()], s.s()))
    with pytest.raises(echomq.errors.InvalidArgument, match="chain step 2"):
        echomq.chain(s.s(), echomq.group(echomq.chain(s.s(), s.s())))
