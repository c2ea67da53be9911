"""The blocking twin of ``send.delay``: ``send.delay_sync`` enqueues through ``echomq.sync``."""

from __future__ import annotations

import pytest
import trio

import echomq
import echomq.sync
from echomq import errors


def make_queue(name: str, url: str) -> tuple[echomq.Queue, echomq.app.Task]:
    q = echomq.Queue(name, url=url)

    @q.task(name="add", max_attempts=3)
    async def add(a: int, b: int) -> int:
        return a + b

    return q, add


def test_delay_sync_writes_the_same_payload(redis_url: str, queue: str) -> None:
    """A blocking enqueue stores the task's JSON call and its options, no event loop needed."""
    _, add = make_queue(queue, redis_url)
    handle = add.apply_sync((1,), {"b": 2}, priority=7, job_id="sync-1")
    assert isinstance(handle, echomq.TaskHandle) and not handle.deduplicated
    job_id = handle.id
    with echomq.sync.connect(redis_url) as conn:
        info = conn.get_job(queue, job_id)
    assert info is not None
    assert info.state is echomq.JobState.PENDING
    assert info.priority == 7 and info.max_attempts == 3
    assert echomq.app.JSON.decode_call(info.payload).kwargs == {"b": 2}
    again_handle = add.apply_sync((5, 6), job_id="sync-1")  # dedupe: nothing written
    assert again_handle.id == "sync-1" and again_handle.deduplicated
    with echomq.sync.connect(redis_url) as conn:
        again = conn.get_job(queue, job_id)
    assert again is not None and echomq.app.JSON.decode_call(again.payload).args == (1,)


def test_delay_sync_refuses_bad_arguments_before_io(closed_port_url: str, queue: str) -> None:
    """Unserialisable arguments raise SerializationError; nothing is dialled."""
    _, add = make_queue(queue, closed_port_url)
    with pytest.raises(errors.SerializationError):
        add.delay_sync(object(), 1)
    with pytest.raises(errors.InvalidKey):
        add.apply_sync((1, 2), job_id="bad id")


async def test_a_worker_runs_a_job_enqueued_blocking(redis_url: str, queue: str) -> None:
    """A job from delay_sync (in a thread) is run by a worker and its result is read."""
    q, add = make_queue(queue, redis_url)
    worker = echomq.Worker(q, concurrency=2)
    with trio.fail_after(10):
        async with q.open(), trio.open_nursery() as nursery:
            await nursery.start(worker.serve)
            handle = await trio.to_thread.run_sync(add.delay_sync, 20, 22)
            assert await q.handle(handle.id).result(timeout=5) == 42
            nursery.cancel_scope.cancel()
