"""``Task.delay`` keeps its task's option set after its first call (gated once, as that
job's, by the queue's producer) and then only binds and encodes the arguments: what it
writes and what it refuses stay those of the long way (``apply`` with no options)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import pytest
import trio

import echomq
from echomq import config, jobs
from echomq._scripts.keyspace import Keyspace
from echomq.app import Task
from echomq.errors import PayloadTooLarge, SerializationError

from .test_coalesce import gated


async def row(conn: echomq.Connection, queue: str, job_id: str) -> dict[bytes, bytes]:
    fields = await conn.execute("HGETALL", Keyspace(queue).job(job_id))
    return dict(zip(fields[::2], fields[1::2], strict=True))


async def test_later_delays_write_the_first_ones_fields(
    conn: echomq.Connection, redis_url: str, queue: str
) -> None:
    """The second delay() (the kept set) writes the row the first one (the long way)
    wrote, but for its id, payload and times; new task options are read again."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task(name="add", priority=3, max_attempts=4, keep_result=60, keep_dead=120)
    async def add(a: int, b: int) -> int:
        return a + b

    with trio.fail_after(10):
        async with q.open():
            first = await add.delay(1, 2)
            assert "add" in q.producer._kept
            second = await add.delay(3, b=4)
            rows = [await row(conn, queue, h.id) for h in (first, second)]
            add.options = attrs.evolve(add.options, priority=-2)
            third = await add.delay(5, 6)
            assert q.producer._kept["add"][0] is add.options
    assert first.id != second.id and not second.deduplicated and second.task == "add"
    skip = {b"payload", b"created_at", b"run_at", b"seq"}
    assert {k: v for k, v in rows[0].items() if k not in skip} == {
        k: v for k, v in rows[1].items() if k not in skip
    }
    assert rows[1][b"priority"] == b"3" and rows[1][b"max_attempts"] == b"4"
    call = q.codec.decode_call(rows[1][b"payload"])
    assert (call.task, call.args, call.kwargs) == ("add", (3,), {"b": 4})
    info = await jobs.get_job(conn, queue, third.id)
    assert info is not None and info.priority == -2


async def test_bad_arguments_still_fail_before_any_io(
    conn: echomq.Connection, redis_url: str, queue: str
) -> None:
    """With the set kept, arguments that do not encode or a payload over the limit raise
    their typed error and nothing is sent."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task(name="echo")
    async def echo(value: Any) -> Any:
        return value

    with trio.fail_after(10):
        async with gated(q) as (coalescer, gate):
            await echo.delay(1)
            assert "echo" in q.producer._kept
            sent = len(gate.sizes)
            with pytest.raises(SerializationError):
                await echo.delay(object())
            with pytest.raises(SerializationError):
                await echo.delay(float("nan"))
            config.set_max_payload(64)
            try:
                with pytest.raises(PayloadTooLarge):
                    await echo.delay("x" * 100)
            finally:
                config.set_max_payload(config.DEFAULT_MAX_PAYLOAD)
            assert len(gate.sizes) == sent and coalescer.queued == 0
            assert (await echo.delay(2)).id  # the coalescer is idle again


async def test_a_group_callable_is_called_per_delay(
    conn: echomq.Connection, redis_url: str, queue: str
) -> None:
    """A task whose group is a callable of the arguments keeps no set: each delay() picks
    its job's group."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task(name="per", group=lambda tenant: f"t{tenant}")
    async def per(tenant: int) -> None:
        return None

    with trio.fail_after(10):
        async with q.open():
            handles = [await per.delay(i) for i in range(3)]
            assert "per" not in q.producer._kept
    groups = [(await row(conn, queue, h.id)).get(b"group") for h in handles]
    assert groups == [b"t0", b"t1", b"t2"]


def _adder(
    q: echomq.Queue,
) -> tuple[Task, list[echomq.TaskHandle], Callable[[int], Awaitable[None]]]:
    """A task ``add`` on ``q``, the handles its ``one(i)`` calls (``add.delay(i, i)``) got."""

    @q.task(name="add")
    async def add(a: int, b: int) -> int:
        return a + b

    handles: list[echomq.TaskHandle] = []

    async def one(i: int) -> None:
        handles.append(await add.delay(i, i))

    return add, handles, one


async def test_concurrent_delays_after_the_first_answer_each_their_id(
    conn: echomq.Connection, redis_url: str, queue: str
) -> None:
    """Callers queued behind a call in flight (the kept set, parked in delay() itself) get
    their own ids, each row written."""
    q = echomq.Queue(queue, url=redis_url)
    add, handles, one = _adder(q)

    with trio.fail_after(10):
        async with gated(q) as (coalescer, gate):
            await add.delay(0, 0)
            gate.hold()
            async with trio.open_nursery() as nursery:
                for i in range(20):
                    nursery.start_soon(one, i)
                await trio.testing.wait_all_tasks_blocked()
                assert coalescer.in_flight == 1 and coalescer.queued == 19
                gate.release()
    assert gate.sizes == [1, 1, 19]
    assert len({h.id for h in handles}) == 20
    for h in handles:
        assert await jobs.get_job(conn, queue, h.id) is not None


async def test_callers_that_come_together_go_as_one_call(
    conn: echomq.Connection, redis_url: str, queue: str
) -> None:
    """Once a lone call had callers queued behind it (crowded), the next lone caller lets
    the ready tasks run first: a nursery of 20 delay() calls is one script call, and a
    caller alone afterwards is sent alone (and the coalescer is no longer crowded)."""
    q = echomq.Queue(queue, url=redis_url)
    add, handles, one = _adder(q)

    with trio.fail_after(10):
        async with gated(q) as (coalescer, gate):
            await add.delay(0, 0)
            assert not coalescer.crowded
            async with trio.open_nursery() as nursery:
                for i in range(20):
                    nursery.start_soon(one, i)
            assert coalescer.crowded and gate.sizes == [1, 1, 19]
            async with trio.open_nursery() as nursery:
                for i in range(20, 40):
                    nursery.start_soon(one, i)
            assert gate.sizes == [1, 1, 19, 20]
            await add.delay(1, 1)  # alone: sent alone, after one checkpoint
            assert gate.sizes[-1] == 1 and not coalescer.crowded
            await add.delay(2, 2)
            assert gate.sizes[-2:] == [1, 1]
    assert len({h.id for h in handles}) == 40
    for h in handles:
        assert await jobs.get_job(conn, queue, h.id) is not None
