"""Calls a user can get wrong are typed refusals before any write: a time the clock cannot
place, a chain changed to contain itself, an asyncio twin called under trio."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
import trio

import echomq
from echomq.errors import InvalidArgument, WrongEventLoop

from ._support import make_queue


async def _keys(conn: echomq.Connection, queue: str) -> list[object]:
    return list(await conn.execute("KEYS", f"emq:{{{queue}}}*"))


@pytest.mark.parametrize(
    "at",
    [
        dt.datetime(1, 1, 1),  # naive: local time, which cannot go back to year 0
        dt.datetime.max,
        dt.datetime(9999, 12, 31, tzinfo=dt.UTC),
        1e308,
        1e18,
        float("inf"),
    ],
)
async def test_an_at_out_of_range_is_invalid_argument_naming_at(
    conn: echomq.Connection, redis_url: str, queue: str, at: dt.datetime | float
) -> None:
    q = make_queue(queue, redis_url)
    async with q.open():
        with pytest.raises(InvalidArgument, match=r"^at "):
            await q.tasks["add"].apply((1, 2), at=at)
        with pytest.raises(InvalidArgument, match=r"^at "):
            echomq.EnqueueOptions(at=at)
    assert await _keys(conn, queue) == []


async def test_a_past_at_is_now_and_a_huge_delay_names_delay(
    conn: echomq.Connection, redis_url: str, queue: str
) -> None:
    q = make_queue(queue, redis_url)
    async with q.open():
        with pytest.raises(InvalidArgument, match=r"^delay "):
            await q.tasks["add"].apply((1, 2), delay=1e308)
        assert await _keys(conn, queue) == []
        handle = await q.tasks["add"].apply((1, 2), at=dt.datetime(1, 1, 1, tzinfo=dt.UTC))
        info = await handle.info()
        assert info is not None and info.state.value in ("pending", "waiting")


async def test_a_chain_changed_to_contain_itself_is_invalid_argument(
    conn: echomq.Connection, redis_url: str, queue: str
) -> None:
    q = echomq.Queue(queue, url=redis_url)

    @q.task(name="step")
    async def step(value: object = None) -> object:
        return value

    looped = echomq.chain(step.s(), step.s())
    looped.steps.append(looped)
    other = echomq.chain(step.s(), step.s())
    other.steps.append(echomq.chord([step.s()], step.s()))
    async with q.open():
        with pytest.raises(InvalidArgument, match="contains itself"):
            await looped.apply()
        with pytest.raises(InvalidArgument, match="chain step 3 must be a task signature"):
            await other.apply()
    assert await _keys(conn, queue) == []


async def test_an_asyncio_twin_under_trio_says_to_use_the_trio_verb(
    conn: echomq.Connection, redis_url: str, queue: str
) -> None:
    q = make_queue(queue, redis_url)
    add = q.tasks["add"]
    with pytest.raises(WrongEventLoop, match=r"under trio use delay\(\)"):
        await add.adelay(1, 2)
    with pytest.raises(WrongEventLoop):
        await add.aapply((1, 2))
    with pytest.raises(RuntimeError):  # still a RuntimeError, as it was
        await q.aclose()

    caught: list[BaseException] = []

    def blocking() -> None:  # plain code in a thread: no loop at all
        try:
            q.asyncio_client()
        except BaseException as exc:
            caught.append(exc)

    thread = threading.Thread(target=blocking)
    thread.start()
    await trio.to_thread.run_sync(thread.join)
    assert len(caught) == 1 and isinstance(caught[0], WrongEventLoop)
    assert "delay_sync()" in str(caught[0])
    assert await _keys(conn, queue) == []


async def test_a_cancel_grace_past_the_cap_is_invalid_argument(
    conn: echomq.Connection, redis_url: str, queue: str
) -> None:
    q = make_queue(queue, redis_url)
    async with q.open():
        handle = await q.tasks["add"].apply((1, 2), delay=3600)
        with pytest.raises(InvalidArgument, match="grace must be at most"):
            await handle.cancel(grace=1e308)
        info = await handle.info()
        assert info is not None and info.cancel_requested_at is None
