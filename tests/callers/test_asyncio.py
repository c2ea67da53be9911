"""The asyncio caller: ``adelay`` / ``aresult`` / ``acancel`` / ``ainfo`` on the same task
objects, and every verb on an ``echomq.asyncio`` connection; on one server and a cluster.

The worker is a trio worker in the test's nursery; the asyncio code runs in a thread of its
own (``asyncio.run``), as a FastAPI process would beside a worker process.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import trio

import echomq
import echomq.asyncio
from echomq import errors

from ._support import make_queue, serving


async def in_asyncio(main: Any) -> Any:
    """Run ``main()`` (a coroutine function) under asyncio in a thread; answer its value."""
    return await trio.to_thread.run_sync(asyncio.run, main())


async def test_adelay_and_aresult(redis_url: str, queue: str) -> None:
    """A job enqueued from asyncio runs on the worker; its result, failure and row arrive."""
    q = make_queue(queue, redis_url)

    async def main() -> tuple[Any, ...]:
        async with q.aopen():
            handle = await q.tasks["add"].adelay(20, 22)
            value = await handle.aresult(timeout=10)
            info = await handle.ainfo()
            failing = await q.tasks["boom"].aapply(priority=3)
            with pytest.raises(errors.JobFailed) as failed:
                await failing.aresult(timeout=10)
            many = [await q.tasks["add"].adelay(i, i) for i in range(20)]
            values = await asyncio.gather(*(h.aresult(timeout=10) for h in many))
            feed = q.asyncio_client().results
            return value, info, failed.value.error, values, feed.waiting

    with trio.fail_after(30):
        async with serving(q):
            value, info, error, values, waiting = await in_asyncio(main)
    assert value == 42
    assert info is not None and info.state is echomq.JobState.COMPLETED
    assert error is not None and "ValueError: no luck" in error
    assert values == [2 * i for i in range(20)]
    assert waiting == 0  # every waiter answered (by its row, or by the stream reader)


async def test_acancel_and_timeouts(redis_url: str, queue: str) -> None:
    """acancel removes a waiting job (aresult: JobCancelled); aresult past its timeout raises
    the builtin TimeoutError; a dedupe answers the existing job's handle."""
    q = make_queue(queue, redis_url)

    async def main() -> None:
        handle = await q.tasks["add"].aapply((1, 2), delay=3600, job_id="later")
        again = await q.tasks["add"].aapply((1, 2), job_id="later")
        assert again.id == "later" and again.deduplicated
        with pytest.raises(TimeoutError):
            await handle.aresult(timeout=0.05)
        assert await handle.acancel("changed my mind") is echomq.cancel.CancelOutcome.REMOVED
        with pytest.raises(errors.JobCancelled) as cancelled:
            await handle.aresult(timeout=5)
        assert cancelled.value.reason == "changed my mind"
        assert await handle.ainfo() is None
        await q.aclose()

    with trio.fail_after(20):
        await in_asyncio(main)


async def test_aresult_cannot_miss(redis_url: str, queue: str) -> None:
    """aresult reads the row, then the completions stream from where the row was read: a
    call made after the job finished, a job finished while 30 calls wait on one reader,
    and a removed job (no entry: the row check answers JobGone) all answer; no worker."""
    q = make_queue(queue, redis_url)
    add = q.tasks["add"]

    async def finish(conn: Any, count: int) -> None:
        held = await echomq.jobs.claim(conn, queue, 60_000, count=count)
        for c in held:
            await echomq.jobs.complete(conn, queue, c.id, c.token, b"7")

    async def main() -> tuple[Any, ...]:
        async with q.aopen():
            client = q.asyncio_client()
            waiters = client.results.waiters
            waiters.gone_check, waiters.block_ms = 0.05, 50  # a removal is noticed soon
            early = await add.adelay(1, 2)
            await finish(client.connection, 1)
            late = await early.aresult(timeout=5)  # finished before the call
            waiting = [await add.adelay(i, i) for i in range(30)]
            tasks = [asyncio.ensure_future(h.aresult(timeout=10)) for h in waiting]
            while client.results.waiting < 30:  # noqa: ASYNC110 - registered at once
                await asyncio.sleep(0.001)
            await finish(client.connection, 30)
            answers = await asyncio.gather(*tasks)
            removed = await add.adelay(5, 5)
            pending = asyncio.ensure_future(removed.aresult(timeout=10))
            while client.results.waiting < 1:  # noqa: ASYNC110
                await asyncio.sleep(0.001)
            await echomq.jobs.remove_job(client.connection, queue, removed.id)
            with pytest.raises(errors.JobGone):
                await pending
            return late, answers

    with trio.fail_after(30):
        late, answers = await in_asyncio(main)
    assert late == 7 and answers == [7] * 30


async def test_verbs_run_on_an_asyncio_connection(redis_url: str, queue: str) -> None:
    """The admin and job verbs take an echomq.asyncio connection as they take a trio one."""

    async def main() -> tuple[Any, ...]:
        async with echomq.asyncio.connect(redis_url) as conn:
            job_id = await echomq.jobs.enqueue(conn, queue, b"payload", priority=2)
            await echomq.admin.pause(conn, queue)
            paused = await echomq.admin.is_paused(conn, queue)
            stats = await echomq.admin.stats(conn, queue)
            queues = await echomq.admin.list_queues(conn)
            drained = await echomq.admin.drain(conn, queue)
            with pytest.raises(errors.DuplicateJob):
                await echomq.jobs.enqueue(conn, queue, b"x", job_id="same")
                await echomq.jobs.enqueue(conn, queue, b"x", job_id="same")
            gone = await echomq.admin.obliterate_all(conn, queue, force=True)
            return job_id, paused, stats, queues, drained, gone

    with trio.fail_after(20):
        job_id, paused, stats, queues, drained, gone = await in_asyncio(main)
    assert len(job_id) == 32 and paused
    assert stats.pending == 1 and stats.paused
    assert queue in queues
    assert drained == 1 and gone >= 1


def test_bad_input_is_refused_before_io(closed_port_url: str, queue: str) -> None:
    """Unencodable arguments and bad ids raise before any connection is dialled."""
    q = make_queue(queue, closed_port_url)

    async def main() -> None:
        with pytest.raises(errors.SerializationError):
            await q.tasks["add"].adelay(object(), 1)
        with pytest.raises(errors.InvalidKey):
            await q.tasks["add"].aapply((1, 2), job_id="bad id")
        with pytest.raises(errors.ConnectionLost):
            await q.tasks["add"].adelay(1, 2)
        await q.aclose()

    asyncio.run(main())


@pytest.mark.single_node("drops one server's socket")
async def test_a_dropped_connection_fails_in_flight_calls_and_reconnects(
    redis_url: str, queue: str
) -> None:
    """A dropped socket fails what was in flight with ConnectionLost (never replayed); the
    next call connects again."""

    async def main() -> None:
        async with echomq.asyncio.connect(redis_url) as conn:
            assert isinstance(conn, echomq.asyncio.AsyncioConnection)
            await conn.execute("PING")
            blocked = asyncio.ensure_future(conn.execute("BLPOP", f"{queue}-nothing", 5))
            while conn._outbox or not conn._waiting:  # noqa: ASYNC110 - written at turn's end
                await asyncio.sleep(0)
            conn.drop()
            with pytest.raises(errors.ConnectionLost):
                await blocked
            assert await conn.execute("PING") == b"PONG"
            assert conn.reconnects == 1

    with trio.fail_after(10):
        await in_asyncio(main)
