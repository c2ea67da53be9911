"""The batched settle (``_worker/settle.py``): the completions of one scheduler tick go
to Redis in one ``complete_many`` call, each job fenced by its own token, and a job counts
as completed (and frees its slot) only once Redis answered for it."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

import echomq
from echomq import jobs
from echomq._worker import settle
from echomq.errors import ConnectionLost

from ._runtime import serving, until, wait_state

Calls = list[list[str]]


def record_batches(monkeypatch: pytest.MonkeyPatch) -> Calls:
    """Note the ids of every complete_many call the worker makes (then make it: its
    ids, tokens and results)."""
    calls: Calls = []
    real = settle.complete_held

    async def complete_many(conn: Any, name: str, *done: Any) -> Any:
        calls.append(list(done[0]))
        return await real(conn, name, *done)

    monkeypatch.setattr(settle, "complete_held", complete_many)
    return calls


async def test_a_batch_settles_its_held_jobs_and_refuses_the_stale_holder(
    redis_url: str, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three jobs finishing in one tick share a call; the one taken over meanwhile is
    answered stale: counted lost, its newer holder's lease untouched; the others complete."""
    calls = record_batches(monkeypatch)
    q = echomq.Queue(queue, url=redis_url)
    finish = trio.Event()

    @q.task(lease=30.0)  # the keeper ticks every 10 s: it will not notice the takeover
    async def slow() -> str:
        await finish.wait()
        return "late"

    worker = echomq.Worker(q, concurrency=3, recovery_interval=60)
    with trio.fail_after(10):
        async with q.open(), serving(worker):
            conn = q.connection
            handles = [await slow.delay() for _ in range(3)]
            for h in handles:
                await wait_state(conn, queue, h.id, "active")
            taken = handles[0].id
            assert await jobs.release(conn, queue, [(taken, 1)]) == {taken: "ok"}
            (newer,) = await jobs.claim(conn, queue, 60_000)
            assert newer.id == taken and newer.token == 2
            finish.set()
            await until(lambda: worker.statistics().completed == 2)
            await until(lambda: worker.statistics().lost == 1)
            info = await handles[0].info()
            assert info is not None and info.state == "active" and info.result is None
            for h in handles[1:]:
                assert await h.result(timeout=5) == "late"
            await jobs.complete(conn, queue, taken, newer.token, b'"the newer holder"')
            assert await handles[0].result(timeout=5) == "the newer holder"
    assert sorted(i for call in calls for i in call) == sorted(h.id for h in handles)
    assert any(taken in call and len(call) > 1 for call in calls)  # refused inside a batch
    assert worker.statistics().held == 0


async def test_a_completion_counts_only_once_redis_has_it(
    redis_url: str, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the batch's call is in flight the job still holds its slot and its lease,
    and is not counted; the answer frees it."""
    real = settle.complete_held
    answer = trio.Event()
    in_flight = trio.Event()

    async def complete_many(conn: Any, name: str, *done: Any) -> Any:
        in_flight.set()
        await answer.wait()
        return await real(conn, name, *done)

    monkeypatch.setattr(settle, "complete_held", complete_many)
    q = echomq.Queue(queue, url=redis_url)

    @q.task()
    async def quick() -> str:
        return "done"

    worker = echomq.Worker(q, concurrency=1, recovery_interval=60)
    with trio.fail_after(10):
        async with q.open(), serving(worker):
            handle = await quick.delay()
            await in_flight.wait()
            await wait_state(q.connection, queue, handle.id, "active")
            stats = worker.statistics()
            assert stats.completed == 0 and stats.held == 1
            answer.set()
            assert await handle.result(timeout=5) == "done"
            await until(lambda: worker.statistics().held == 0)
    assert worker.statistics().completed == 1


async def test_a_batch_whose_reply_was_lost_is_sent_again_and_settles_once(
    redis_url: str, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ConnectionLost after the call ran: the batch is sent again with the same tokens,
    answered ok (already completed), counted once, one completions entry per job."""
    real = settle.complete_held
    attempts: list[int] = []

    async def complete_many(conn: Any, name: str, *done: Any) -> Any:
        answers = await real(conn, name, *done)
        attempts.append(len(answers))
        if len(attempts) == 1:
            raise ConnectionLost("the reply was lost")
        return answers

    monkeypatch.setattr(settle, "complete_held", complete_many)
    q = echomq.Queue(queue, url=redis_url)

    @q.task()
    async def quick(n: int) -> int:
        return n

    worker = echomq.Worker(q, concurrency=1, recovery_interval=60)
    with trio.fail_after(10):
        async with q.open(), serving(worker):
            handle = await quick.delay(7)
            assert await handle.result(timeout=5) == 7
            await until(lambda: worker.statistics().completed == 1)
            entries = await q.connection.execute("XLEN", f"emq:{{{queue}}}:completions")
    assert attempts == [1, 1]
    assert entries == 1
    stats = worker.statistics()
    assert stats.completed == 1 and stats.lost == 0 and stats.held == 0


async def test_a_stop_while_a_batch_is_in_flight_waits_for_its_answer(
    redis_url: str, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shutdown does not hand back a job whose completion is in flight: the shielded
    call finishes, the job is completed, nothing is released."""
    real = settle.complete_held
    answer = trio.Event()
    in_flight = trio.Event()

    async def complete_many(conn: Any, name: str, *done: Any) -> Any:
        in_flight.set()
        await answer.wait()
        return await real(conn, name, *done)

    monkeypatch.setattr(settle, "complete_held", complete_many)
    q = echomq.Queue(queue, url=redis_url)

    @q.task()
    async def quick() -> str:
        return "done"

    worker = echomq.Worker(q, concurrency=1, recovery_interval=60)
    with trio.fail_after(10):
        async with q.open():
            async with serving(worker):
                handle = await quick.delay()
                await in_flight.wait()
                worker.shutdown(grace=0)  # stop waiting for held jobs: cancel them
                await until(lambda: worker.statistics().stopping)
                await trio.testing.wait_all_tasks_blocked(cushion=0.02)  # the shield holds
                assert worker.statistics().held == 1
                answer.set()
            info = await handle.info()
    assert info is not None and info.state == "completed"
    stats = worker.statistics()
    assert stats.completed == 1 and stats.released == 0
