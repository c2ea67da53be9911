"""``map`` / ``starmap`` and their asyncio and blocking twins: every call checked first,
then chunks of at most MAX_ENQUEUE jobs in one pipelined write, the handles in order; and
flows started from asyncio and blocking code (``aapply`` / ``apply_sync``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import trio

import echomq
from echomq import config, jobs
from echomq._scripts import validate as v
from echomq.errors import InvalidArgument, SerializationError

from ._support import make_queue, serving
from .test_asyncio import in_asyncio


class Counting:
    """An Executor around ``conn`` counting its pipelines and their EVALSHAs."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.sharded_pubsub = getattr(conn, "sharded_pubsub", False)
        self.pipelines: list[int] = []

    async def execute(self, *args: Any) -> Any:
        return await self.conn.execute(*args)

    async def execute_pipeline(self, commands: Any) -> list[Any]:
        self.pipelines.append(sum(1 for c in commands if c[0] == "EVALSHA"))
        return list(await self.conn.execute_pipeline(commands))


async def test_starmap_sends_chunks_in_one_pipeline(redis_url: str, queue: str) -> None:
    """600 calls: three script calls (250, 250, 100) in one pipelined write; the handles
    answer in order, each row its own arguments."""
    q = make_queue(queue, redis_url)
    add = q.tasks["add"]
    with trio.fail_after(20):
        async with q.open():
            counting = Counting(q.connection)
            calls = [((i, i), {}) for i in range(600)]
            answers = await q.producer.enqueue_many(counting, add, calls)
            assert counting.pipelines == [3]
            handles = await add.starmap([(i, 1) for i in range(5)])
            mapped = await q.tasks["wait"].map([0.0, 0.0])
            for i, handle in enumerate(handles):
                info = await handle.info()
                assert info is not None and q.codec.decode_call(info.payload).args == (i, 1)
            assert len({job_id for job_id, _ in answers}) == 600
            for job_id, deduplicated in answers[:: v.MAX_ENQUEUE - 1]:
                assert not deduplicated and await jobs.get_job(q.connection, queue, job_id)
        async with serving(q):
            assert [await h.result(timeout=10) for h in handles] == [1, 2, 3, 4, 5]
            assert [await h.result(timeout=10) for h in mapped] == ["waited", "waited"]


async def test_a_bad_call_sends_nothing(redis_url: str, queue: str) -> None:
    """One wrong call, one argument the codec refuses, or a job_id: nothing is written."""
    q = make_queue(queue, redis_url)
    add = q.tasks["add"]
    with trio.fail_after(10):
        async with q.open():
            with pytest.raises(TypeError, match="missing a required argument"):
                await add.starmap([(1, 2), (3,)])
            with pytest.raises(SerializationError):
                await add.starmap([(1, 2), (object(), 1)])
            with pytest.raises(InvalidArgument, match="job_id"):
                await add.starmap([(1, 2)], job_id="one")
            with pytest.raises(InvalidArgument, match="sequences"):
                await add.starmap([5])  # type: ignore[list-item]
            with pytest.raises(TypeError):
                await add.map([1])  # add takes two
            assert await echomq.admin.stats(q.connection, queue) is not None
            assert (await echomq.admin.stats(q.connection, queue)).pending == 0
            assert await add.starmap([]) == []


async def test_chunks_keep_the_byte_cap(
    redis_url: str, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk's payloads stay within config.MAX_BATCH_BYTES."""
    monkeypatch.setattr(config, "MAX_BATCH_BYTES", 300)
    q = make_queue(queue, redis_url)
    with trio.fail_after(10):
        async with q.open():
            counting = Counting(q.connection)
            wait = q.tasks["wait"]
            size = len(q.producer.gate(wait, (0.0,)).payload)
            answers = await q.producer.enqueue_many(counting, wait, [((0.0,), {})] * 9)
    per_chunk = 300 // size
    assert len(answers) == 9 and counting.pipelines == [-(-9 // per_chunk)]


async def test_map_from_asyncio_and_blocking_code(redis_url: str, queue: str) -> None:
    """amap / astarmap and map_sync / starmap_sync answer handles whose results arrive."""
    q = make_queue(queue, redis_url)
    add = q.tasks["add"]

    async def from_asyncio() -> list[Any]:
        async with q.aopen():
            handles = await add.astarmap([(1, 2), (3, 4)])
            with pytest.raises(TypeError):
                await add.amap([1])
            return [await h.aresult(timeout=10) for h in handles]

    def from_blocking() -> list[Any]:
        handles = add.starmap_sync([(5, 6), (7, 8)])
        with pytest.raises(TypeError):
            add.map_sync([1])
        mapped = q.tasks["wait"].map_sync([0.0])
        return [h.result_sync(timeout=10) for h in handles + mapped]

    with trio.fail_after(30):
        async with serving(q):
            assert await in_asyncio(from_asyncio) == [3, 7]
            assert await trio.to_thread.run_sync(from_blocking) == [11, 15, "waited"]
    q.close_sync()


async def test_flows_from_asyncio_and_blocking_code(redis_url: str, queue: str) -> None:
    """A chain applied from asyncio and from blocking code runs; its handle's twins
    answer the last step's result; a chain step that cannot take its arguments is refused
    before any write."""
    q = make_queue(queue, redis_url)
    add = q.tasks["add"]
    with pytest.raises(TypeError):  # add(<result>, 1, 2): one argument too many
        echomq.chain(add.s(1, 2), add.s(1, 2)).flow_jobs()

    async def from_asyncio() -> Any:
        async with q.aopen():
            handle = await echomq.chain(add.s(1, 2), add.s(10)).aapply()
            return await handle.aresult(timeout=10)

    def from_blocking() -> Any:
        return echomq.group(add.s(1, 1), add.s(2, 2)).apply_sync().result_sync(timeout=10)

    with trio.fail_after(30):
        async with serving(q):
            assert await in_asyncio(from_asyncio) == 13
            assert await trio.to_thread.run_sync(from_blocking) == [2, 4]
    q.close_sync()


def test_asyncio_bulk_gates_before_io(closed_port_url: str) -> None:
    """amap refuses a wrong call with no server to talk to."""
    q = make_queue("nowhere", closed_port_url)

    async def main() -> None:
        with pytest.raises(TypeError):
            await q.tasks["add"].astarmap([(1,)])
        await q.aclose()

    asyncio.run(main())
