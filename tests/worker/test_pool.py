"""The slot pool (``_worker/pool.py``): jobs run in long-lived tasks, each job in a fresh
copy of the slot's context, and the slots end with the worker."""

from __future__ import annotations

import contextvars

import pytest
import trio
import trio.testing

import echomq
from echomq._model.job import Claimed
from echomq._worker.cancellation import Held
from echomq._worker.pool import SlotPool

from ._runtime import serving

_seen: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="")


async def test_a_job_does_not_see_the_context_variables_of_the_slots_last_job(
    redis_url: str, queue: str
) -> None:
    q = echomq.Queue(queue, url=redis_url)
    tasks: set[int] = set()

    @q.task
    async def mark(n: int) -> str:
        before = _seen.get()
        _seen.set(f"job {n}")
        tasks.add(id(trio.lowlevel.current_task()))
        return before

    with trio.fail_after(20):
        async with q.open():
            worker = echomq.Worker(q, concurrency=1)
            async with serving(worker):
                handles = [await mark.delay(n) for n in range(5)]
                assert [await h.result(timeout=15) for h in handles] == [""] * 5
            # the worker's serve returned: its slot tasks ended with it
    assert len(tasks) == 1  # one slot task ran them all, one after another
    assert worker.statistics().completed == 5


# -- rule 1: a slot task on duty runs the queued jobs one after another ----------------------


def _job(n: int) -> tuple[Claimed, Held]:
    return Claimed(id=f"j{n}", payload=b"", token=1), Held(f"j{n}", 1, 1000)


async def test_queued_jobs_run_back_to_back_each_in_its_own_scope_and_context() -> None:
    """Jobs that never wait run in one slot task, one wakeup for all of them, and still each
    in its own cancel scope (one cancelled before it started catches only its own
    cancellation) and in a fresh copy of the context."""
    seen: list[tuple[str, int, str, bool]] = []

    async def run(job: Claimed, held: Held) -> None:
        before = _seen.get()
        _seen.set(job.id)
        with held.scope:
            await trio.lowlevel.checkpoint_if_cancelled()  # (never waits when not cancelled)
        seen.append((job.id, id(trio.lowlevel.current_task()), before, held.scope.cancelled_caught))

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            slots = SlotPool(nursery, run)
            jobs = [_job(n) for n in range(5)]
            jobs[4][1].scope.cancel()  # a cancel that reached the last before it started
            for claimed, held in jobs:
                slots.start(claimed, held)
            await trio.testing.wait_all_tasks_blocked()
            slots.close()
    assert [s[0] for s in seen] == ["j0", "j1", "j2", "j3", "j4"]
    assert len({s[1] for s in seen}) == 1 and slots.started == 1 and slots.wakeups == 0
    assert [s[2] for s in seen] == [""] * 5  # no job saw the one before's variable
    assert [s[3] for s in seen] == [False, False, False, False, True]


async def test_a_job_that_waits_hands_the_queue_to_another_slot_task() -> None:
    """The moment a job waits, another slot task runs the jobs queued behind it."""
    gate = trio.Event()
    ran: dict[str, int] = {}

    async def run(job: Claimed, held: Held) -> None:
        ran[job.id] = id(trio.lowlevel.current_task())
        if job.id == "j1":
            with held.scope:
                await gate.wait()

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            slots = SlotPool(nursery, run)
            for n in range(4):
                slots.start(*_job(n))
            await trio.testing.wait_all_tasks_blocked()
            assert set(ran) == {"j0", "j1", "j2", "j3"}  # j2, j3 did not wait for j1
            assert ran["j0"] == ran["j1"] != ran["j2"] == ran["j3"]
            gate.set()
            await trio.testing.wait_all_tasks_blocked()
            slots.start(*_job(4))  # both idle now: one is woken for it
            await trio.testing.wait_all_tasks_blocked()
            assert slots.started == 2 and slots.wakeups == 1 and "j4" in ran
            slots.close()


async def test_a_cancelled_jobs_nursery_still_starts_each_queued_job() -> None:
    """Each queued job still starts (and takes the cancellation, so the runner hands it
    back), as when each had a task of its own."""
    ran: list[str] = []

    async def run(job: Claimed, held: Held) -> None:
        ran.append(job.id)
        with held.scope:
            await trio.lowlevel.checkpoint()  # the nursery's cancellation lands here

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            slots = SlotPool(nursery, run)
            for n in range(3):
                slots.start(*_job(n))
            nursery.cancel_scope.cancel()
    assert ran == ["j0", "j1", "j2"]
    assert slots.unstarted() == []


async def test_jobs_no_slot_task_started_are_left_for_the_hand_back() -> None:
    """A slot task that fails (never a job's failure: the runner keeps those) takes the
    jobs nursery down; the jobs still queued never started: ``unstarted()`` gives them to
    the claim loop's hand-back."""
    ran: list[str] = []

    async def run(job: Claimed, held: Held) -> None:
        ran.append(job.id)
        raise RuntimeError("a bug in the runner")

    with pytest.raises(ExceptionGroup), trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            slots = SlotPool(nursery, run)
            for n in range(3):
                slots.start(*_job(n))
    assert ran == ["j0"]
    assert [claimed.id for claimed, _ in slots.unstarted()] == ["j1", "j2"]
    assert slots.unstarted() == []


async def test_a_job_handed_over_directly_can_be_cancelled(redis_url: str, queue: str) -> None:
    """One claim of 4 jobs: the first two run in the same slot task, one after the other;
    the second waits, so the other two run in another slot task meanwhile; a cancel
    request still reaches the second, and only it."""
    q = echomq.Queue(queue, url=redis_url)
    started = trio.Event()
    tasks: dict[int, int] = {}

    @q.task
    async def step(n: int) -> int:
        tasks[n] = id(trio.lowlevel.current_task())
        if n == 1:
            started.set()
            await trio.sleep_forever()
        return n

    with trio.fail_after(20):
        async with q.open():
            handles = [await step.delay(n) for n in range(4)]  # waiting before the worker
            async with serving(echomq.Worker(q, concurrency=8)):  # one claim asks for 4
                await started.wait()
                assert [await handles[n].result(timeout=15) for n in (0, 2, 3)] == [0, 2, 3]
                await handles[1].cancel("enough")
                with pytest.raises(echomq.JobCancelled) as caught:
                    await handles[1].result(timeout=15)
    assert caught.value.reason == "enough"
    assert tasks[0] == tasks[1] != tasks[2] == tasks[3]
