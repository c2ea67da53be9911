"""A job's trio mistakes stay the job's (docs/runtime.md, "Running a job").

A ``trio.Cancelled`` that no cancellation asked for, a cancel of the slot task's parent
nursery, a cancel scope left open (by hand, or by an async generator suspended inside one):
each is that job's failure, counted, retried and dead-lettered by its policy, with a
``last_error`` that says what the code did. The worker keeps serving, and the innocent
jobs that run after it, in the same slot task, complete with no stall counted.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

import echomq
from echomq.errors import JobCancelled, JobFailed

from . import _isolation_tasks as poison
from ._runtime import serving, until

ATTEMPTS = 2
CANARIES = 4
# trio warns of the generator a poison job drops unexhausted (as it should: that is the bug)
pytestmark = pytest.mark.filterwarnings(
    "ignore:Async generator .* was garbage collected:ResourceWarning"
)


def _queue(name: str, url: str, **options: Any) -> echomq.Queue:
    q = echomq.Queue(name, url=url)
    poison.register(q, max_attempts=ATTEMPTS, backoff=0, **options)
    return q


async def _dead(q: echomq.Queue, job_id: str) -> echomq.JobInfo:
    with pytest.raises(JobFailed):
        await q.handle(job_id).result(timeout=10)
    info = await q.handle(job_id).info()
    assert info is not None
    return info


async def _canaries(q: echomq.Queue, wait: float) -> list[echomq.JobInfo]:
    """Innocent jobs, one after another (a poison job's slot task runs them), each waiting
    ``wait`` seconds (so that a scope a poison job left open reaches its deadline while
    they run): each completes, claimed once, no stall counted."""
    infos = []
    for n in range(CANARIES):
        handle = await q.tasks["canary"].delay(n, wait)
        assert await handle.result(timeout=10) == n + 1
        info = await handle.info()
        assert info is not None
        infos.append(info)
    return infos


# "timed": a task with a timeout runs through the runner's general path, not the inline
# one (a thread task always does)
CASES = [
    (name, path)
    for name in sorted(poison.POISON)
    for path in ("plain", "timed")
    if not (name == "thread-cancelled" and path == "plain")
]


@pytest.mark.parametrize(("name", "path"), CASES)
async def test_a_job_that_misuses_trio_fails_with_its_reason_and_the_worker_serves_on(
    redis_url: str, queue: str, name: str, path: str
) -> None:
    q = _queue(queue, redis_url, **({"timeout": 30} if path == "timed" else {}))
    worker = echomq.Worker(q, concurrency=1)
    with trio.fail_after(30):
        async with q.open(), serving(worker):
            handle = await q.tasks[name].delay()
            info = await _dead(q, handle.id)
            canaries = await _canaries(q, poison.LEAK)
            # and the slot task it ran in still takes a cancel for its own job
            stuck = await q.tasks["canary"].delay(0, 3600)
            await until(lambda: worker.statistics().held == 1)
            await stuck.cancel("enough")
            with pytest.raises(JobCancelled):
                await stuck.result(timeout=10)
            assert await (await q.tasks["canary"].delay(41)).result(timeout=10) == 42
    assert info.last_error is not None and poison.REASONS[name] in info.last_error, info
    assert (info.failures, info.token, info.stalled) == (ATTEMPTS, ATTEMPTS, 0)
    assert [(c.token, c.stalled, c.failures) for c in canaries] == [(1, 0, 0)] * CANARIES
    stats = worker.statistics()
    assert (stats.failed, stats.retried, stats.lost) == (1, ATTEMPTS - 1, 0)
    assert (stats.completed, stats.cancelled) == (CANARIES + 1, 1)


async def test_several_poison_jobs_at_once_leave_the_other_slots_alone(
    redis_url: str, queue: str
) -> None:
    """Every kind of poison side by side with waiting canaries in other slot tasks: the
    canaries complete, each poison job is dead with its reason."""
    q = _queue(queue, redis_url)
    worker = echomq.Worker(q, concurrency=8)
    with trio.fail_after(30):
        async with q.open(), serving(worker):
            waiting = [await q.tasks["canary"].delay(n, 0.2) for n in range(4)]
            bad = {name: await q.tasks[name].delay() for name in poison.POISON}
            after = [await q.tasks["canary"].delay(n, poison.LEAK) for n in range(20)]
            for handles in (waiting, after):
                for n, handle in enumerate(handles):
                    assert await handle.result(timeout=10) == n + 1
            reasons = {name: (await _dead(q, h.id)).last_error for name, h in bad.items()}
    for name, error in reasons.items():
        assert error is not None and poison.REASONS[name] in error, (name, error)
    stats = worker.statistics()
    assert stats.completed == len(waiting) + len(after) and stats.failed == len(bad)


async def test_a_job_that_cancels_its_slot_without_waiting_after_fails_too(
    redis_url: str, queue: str
) -> None:
    """Cancelling the slot task's nursery and returning at once (no checkpoint for the
    cancellation to land on) is the same failure: the slot it cancelled is replaced."""
    q = _queue(queue, redis_url)

    @q.task(name="cancel-and-return", max_attempts=1)
    async def cancel_and_return() -> int:
        nursery = trio.lowlevel.current_task().parent_nursery
        assert nursery is not None
        nursery.cancel_scope.cancel()
        return 1

    worker = echomq.Worker(q, concurrency=1)
    with trio.fail_after(30):
        async with q.open(), serving(worker):
            info = await _dead(q, (await cancel_and_return.delay()).id)
            canaries = await _canaries(q, 0.01)
    assert info.last_error is not None
    assert poison.REASONS["cancel-parent-nursery"] in info.last_error
    assert [(c.token, c.stalled) for c in canaries] == [(1, 0)] * CANARIES


async def test_a_job_that_leaves_a_nursery_open_fails_and_its_slot_is_replaced(
    redis_url: str, queue: str
) -> None:
    """A nursery opened by hand and never closed (its child still running) cannot be
    repaired in place: the job fails with the reason, its slot task ends, and a fresh one
    runs the next jobs."""
    q = _queue(queue, redis_url)

    @q.task(name="open-nursery", max_attempts=1)
    async def open_nursery() -> None:
        nursery = await trio.open_nursery().__aenter__()
        nursery.start_soon(trio.sleep_forever)

    worker = echomq.Worker(q, concurrency=1)
    with trio.fail_after(30):
        async with q.open(), serving(worker):
            info = await _dead(q, (await open_nursery.delay()).id)
            canaries = await _canaries(q, 0.01)
    assert info.last_error is not None
    assert info.last_error.startswith("RuntimeError: the task left a cancel scope open")
    assert [(c.token, c.stalled) for c in canaries] == [(1, 0)] * CANARIES


async def test_a_job_that_reaches_the_workers_own_nursery_fails_the_worker_loudly(
    redis_url: str, queue: str
) -> None:
    """What no slot can contain (a job cancelling the worker's jobs nursery, two nurseries
    up) stops the worker as a failure, never as a clean stop: ``serve`` raises, and the job
    is left to recovery as a stall (counted), not handed back uncounted."""
    q = _queue(queue, redis_url)
    worker = echomq.Worker(q, concurrency=2)
    with trio.fail_after(30):
        async with q.open():
            handle = await q.tasks["reach-up"].delay()
            with pytest.RaisesGroup(
                pytest.RaisesExc(RuntimeError, match="no shutdown was asked for"),
                flatten_subgroups=True,
            ):
                async with trio.open_nursery() as nursery:
                    await nursery.start(worker.serve)
            info = await handle.info()
    assert info is not None and info.state == "active"  # its lease cut: recovery's now
    assert worker.statistics().released == 0
