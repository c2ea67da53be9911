"""The blocking caller: ``delay_sync`` answers a handle whose ``result_sync``,
``cancel_sync`` and ``info_sync`` block, and ``echomq.sync`` runs the operator verbs; on one
server and a cluster. The blocking code runs in a thread beside the trio worker."""

from __future__ import annotations

from typing import Any

import pytest
import trio

import echomq
import echomq.sync
from echomq import errors

from ._support import make_queue, serving


async def test_delay_sync_and_result_sync(redis_url: str, queue: str) -> None:
    """A blocking enqueue runs on the worker; result_sync answers its value or its failure."""
    q = make_queue(queue, redis_url)

    def main() -> tuple[Any, ...]:
        handle = q.tasks["add"].delay_sync(2, 3)
        value = handle.result_sync(timeout=10)
        info = handle.info_sync()
        with pytest.raises(errors.JobFailed) as failed:
            q.tasks["boom"].delay_sync().result_sync(timeout=10)
        slow = q.tasks["wait"].delay_sync(0.2)
        return value, info, failed.value.error, slow.result_sync(timeout=10)

    with trio.fail_after(30):
        async with serving(q):
            value, info, error, waited = await trio.to_thread.run_sync(main)
    q.close_sync()
    assert value == 5 and waited == "waited"
    assert info is not None and info.state is echomq.JobState.COMPLETED
    assert error is not None and "ValueError: no luck" in error


async def test_cancel_sync_and_timeout(redis_url: str, queue: str) -> None:
    """cancel_sync removes a waiting job; result_sync then raises JobCancelled; a wait past
    its timeout raises the builtin TimeoutError."""
    q = make_queue(queue, redis_url)

    def main() -> None:
        handle = q.tasks["add"].apply_sync((1, 1), delay=3600)
        with pytest.raises(TimeoutError):
            handle.result_sync(timeout=0.05)
        assert handle.cancel_sync("no longer") is echomq.cancel.CancelOutcome.REMOVED
        with pytest.raises(errors.JobCancelled) as cancelled:
            handle.result_sync(timeout=5)
        assert cancelled.value.reason == "no longer"
        with pytest.raises(errors.JobGone):
            q.handle("never-was").result_sync(timeout=5)
        q.close_sync()

    with trio.fail_after(20):
        await trio.to_thread.run_sync(main)


def test_operator_verbs_blocking(redis_url: str, queue: str) -> None:
    """pause / stats / drain / obliterate / list_queues / any verb through run()."""
    with echomq.sync.connect(redis_url) as mq:
        job_id = mq.enqueue(queue, b"x")
        mq.pause(queue)
        assert mq.is_paused(queue)
        stats = mq.stats(queue)
        assert stats.pending == 1 and stats.paused
        assert queue in mq.list_queues()
        assert mq.run(echomq.jobs.get_job_logs, queue, job_id) == []
        assert mq.run(echomq.admin.active_jobs, queue) == []
        mq.enqueue(queue, b"y", job_id="second")
        assert mq.cancel(queue, "second") is echomq.cancel.CancelOutcome.REMOVED
        with pytest.raises(errors.JobGone):
            mq.cancel(queue, "second")
        assert mq.drain(queue) == 1
        mq.resume(queue)
        assert not mq.is_paused(queue)
        with pytest.raises(errors.NotPaused):
            mq.obliterate(queue)
        mq.pause(queue)
        assert mq.obliterate(queue, force=True) >= 1
        assert queue not in mq.list_queues()


def test_a_verb_that_suspends_is_refused(redis_url: str) -> None:
    """run() drives a verb's coroutine in one step; one that awaits an event loop's I/O is
    a bug, refused with RuntimeError (and closed)."""

    async def suspends(conn: object) -> None:
        await trio.lowlevel.checkpoint()

    with echomq.sync.connect(redis_url) as mq, pytest.raises(RuntimeError, match="suspended"):
        mq.run(suspends)
