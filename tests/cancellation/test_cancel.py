"""Cooperative cancellation: request by id, the token bridged to the job's cancel scope."""

from __future__ import annotations

import time

import pytest
import trio

import echomq
from echomq import cancel, jobs
from echomq._worker.cancellation import Held, InFlight, Stop
from echomq.errors import JobCancelled, JobGone, NotCancellable
from worker._runtime import serving, until, wait_state


def test_cancel_token_is_a_flag_whose_first_reason_wins() -> None:
    """CancelToken: poll/check/reason; the first cancel's reason is kept."""
    token = echomq.CancelToken()
    assert not token.poll() and not token.cancelled
    token.check()
    token.cancel("first")
    token.cancel("second")
    assert token.poll() and token.reason == "first"
    with pytest.raises(JobCancelled) as caught:
        token.check()
    assert caught.value.reason == "first"


async def test_cancel_request_before_the_claim_answers_is_kept_for_it() -> None:
    """A cancel heard before its job is registered cancels the job on registration."""
    inflight = InFlight()
    assert not inflight.request_cancel("early", "too soon")
    held = inflight.add("early", 1, 1000)
    assert held.stop is Stop.CANCEL and held.scope.cancel_called
    assert held.cancel_token.reason == "too soon"
    other = inflight.add("other", 1, 1000)
    assert other.stop is None and not other.scope.cancel_called


async def test_cancel_pending_job_removes_it(redis_url: str, queue: str) -> None:
    """A pending (or scheduled) job is removed; its result() raises JobCancelled."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task
    async def never() -> None:
        raise AssertionError("a removed job must not run")

    with trio.fail_after(5):
        async with q.open():
            pending = await never.delay()
            scheduled = await never.apply(delay=60)
            assert await pending.cancel("changed my mind") == "removed"
            assert await cancel.request(q.connection, queue, scheduled.id) == "removed"
            assert await pending.info() is None and await scheduled.info() is None
            with pytest.raises(JobCancelled) as caught:
                await pending.result(timeout=1)
            with pytest.raises(JobGone):  # another handle did the removing: the row is gone
                await scheduled.result(timeout=1)
    assert caught.value.reason == "changed my mind"


async def test_cancel_active_job_interrupts_it_at_its_next_checkpoint(
    redis_url: str, queue: str
) -> None:
    """An active job's scope is cancelled; it completes as cancelled and is not retried."""
    q = echomq.Queue(queue, url=redis_url)
    reached: list[str] = []

    @q.task(max_attempts=3)
    async def long() -> None:
        reached.append("start")
        await trio.sleep(30)
        reached.append("past the checkpoint")

    worker = echomq.Worker(q)
    with trio.fail_after(5):
        async with q.open(), serving(worker):
            handle = await long.delay()
            await wait_state(q.connection, queue, handle.id, "active")
            await until(lambda: bool(reached))
            assert await handle.cancel("user asked") == "signalled"
            with pytest.raises(JobCancelled) as caught:
                await handle.result(timeout=5)
            info = await handle.info()
    assert reached == ["start"]
    assert caught.value.reason == "user asked"
    assert info is not None and info.state == "cancelled" and info.cancelled
    assert (info.cancel_reason, info.result, info.failures) == ("user asked", None, 0)
    assert worker.statistics().cancelled == 1


async def test_shielded_section_finishes_before_the_cancel_lands(
    redis_url: str, queue: str
) -> None:
    """Inside job.shielded() the cancel waits; the handler stops at the checkpoint after it."""
    q = echomq.Queue(queue, url=redis_url)
    steps: list[str] = []

    @q.task
    async def careful(job: echomq.Job) -> None:
        with job.shielded():
            steps.append("shield entered")
            await until(lambda: job.cancelled)
            await trio.sleep(0.1)  # still inside: not interrupted
            steps.append("shield finished")
        await trio.sleep(30)
        steps.append("past the checkpoint")

    with trio.fail_after(5):
        async with q.open(), serving(echomq.Worker(q)):
            handle = await careful.delay()
            await until(lambda: bool(steps))
            await handle.cancel("stop")
            with pytest.raises(JobCancelled):
                await handle.result(timeout=5)
    assert steps == ["shield entered", "shield finished"]


async def test_handler_that_never_awaits_after_the_cancel_completes_normally(
    redis_url: str, queue: str
) -> None:
    """Cooperative: a cancel that reaches no checkpoint changes nothing; the result stands."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task
    async def stubborn(job: echomq.Job) -> str:
        with job.shielded():
            await until(lambda: job.cancelled)
        time.sleep(0.05)  # noqa: ASYNC251 - busy work with no checkpoint after the cancel
        return "finished anyway"

    with trio.fail_after(5):
        async with q.open(), serving(echomq.Worker(q)):
            handle = await stubborn.delay()
            await wait_state(q.connection, queue, handle.id, "active")
            await handle.cancel("too late")
            assert await handle.result(timeout=5) == "finished anyway"


async def test_handler_raising_job_cancelled_completes_as_cancelled(
    redis_url: str, queue: str
) -> None:
    """A sync handler polling its token (token.check()) ends as cancelled, with the reason."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task
    def polling() -> None:
        token = echomq.current_job().cancel_token
        for _ in range(500):
            token.check()
            time.sleep(0.01)

    with trio.fail_after(8):
        async with q.open(), serving(echomq.Worker(q)):
            handle = await polling.delay()
            await wait_state(q.connection, queue, handle.id, "active")
            await handle.cancel("checked")
            with pytest.raises(JobCancelled) as caught:
                await handle.result(timeout=6)
    assert caught.value.reason == "checked"


async def test_cancel_refuses_finished_and_missing_jobs(redis_url: str, queue: str) -> None:
    """A completed job is NotCancellable; an unknown id is JobGone."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task
    async def quick() -> int:
        return 1

    with trio.fail_after(5):
        async with q.open(), serving(echomq.Worker(q)):
            handle = await quick.delay()
            await handle.result(timeout=5)
            with pytest.raises(NotCancellable):
                await handle.cancel()
            with pytest.raises(JobGone):
                await cancel.request(q.connection, queue, "no-such-job")
            assert await jobs.get_job(q.connection, queue, "no-such-job") is None


def test_a_held_jobs_cancel_token_is_made_once_when_first_asked_for() -> None:
    """The token is made lazily (most jobs never read it); a cancel before anyone asked
    still lands on the one token every later reader sees."""
    held = Held("j", 1, 1000)
    assert held.cancel_token is held.cancel_token and not held.cancel_token.cancelled
    early = Held("k", 1, 1000)
    early.cancel("asked")
    assert early.stop is Stop.CANCEL and early.scope.cancel_called
    assert early.cancel_token.cancelled and early.cancel_token.reason == "asked"
