"""A plain job runs its handler in its slot task's scope (``cancellation.py`` rule 5):
one ``trio.CancelScope`` for a run of jobs, the job's scope only while its handler runs.
What DESIGN promises of a job's own scope still holds: a cancel stops the handler at its
next checkpoint (not inside ``job.shielded()``), a handler that reaches none completes
normally, and no cancellation reaches the job's settling or another job."""

from __future__ import annotations

import math

import pytest
import trio

import echomq
from echomq._worker.cancellation import Held, Stop
from echomq._worker.pool import SlotScope
from echomq.errors import JobCancelled

from ._runtime import serving, until


def _slot_task() -> int:
    return id(trio.lowlevel.current_task())


async def test_the_stops_cancel_the_slot_scope_only_while_the_handler_runs_in_it() -> None:
    """Held's guard: ``running`` set, the slot scope is cancelled and its own scope is not;
    before and after, its own scope (the one a job stopped before it starts runs in)."""
    slot = SlotScope()
    shared = slot.enter()
    try:
        before = Held("a", 1, 1000)
        before.cancel("early")  # not started: its own scope
        assert before.scope.cancel_called and not shared.cancel_called

        held = Held("b", 1, 1000)
        held.running = slot
        held.lose()
        assert shared.cancel_called and slot.cancelled and not held.scope.cancel_called
        assert held.stop is Stop.LOST
        held.running = None
        held.shut_down()  # its handler is out: the slot scope is no longer its scope
        assert held.scope.cancel_called
    finally:
        slot.leave()
    assert slot.scope is None


async def test_a_cancel_after_the_last_checkpoint_reaches_neither_its_settling_nor_the_next_job(
    redis_url: str, queue: str
) -> None:
    """(a) The cancel lands while the handler is scheduled but not yet resumed; it returns
    with no checkpoint after: completed normally (as a job with a scope of its own), and the
    next job of the same slot task runs in a fresh scope (it checkpoints: not cancelled)."""
    q = echomq.Queue(queue, url=redis_url)
    waiting, gate = trio.Event(), trio.Event()
    seen: list[tuple[int, int, float]] = []

    @q.task
    async def late(n: int) -> int:
        seen.append((n, _slot_task(), trio.current_effective_deadline()))
        if n == 0:
            waiting.set()
            await gate.wait()
        else:
            for _ in range(3):
                await trio.lowlevel.checkpoint()
        return n

    worker = echomq.Worker(q, concurrency=1)
    with trio.fail_after(10):
        async with q.open(), serving(worker):
            first = await late.delay(0)
            await waiting.wait()
            gate.set()  # the handler is rescheduled ...
            assert worker.inflight.request_cancel(first.id, "late")  # ... and cancelled
            assert await first.result(timeout=5) == 0
            second = await late.delay(1)
            assert await second.result(timeout=5) == 1
            info = await first.info()
    assert info is not None and info.state == "completed" and not info.cancelled
    assert [n for n, _, _ in seen] == [0, 1] and seen[0][1] == seen[1][1]  # one slot task
    assert [d for _, _, d in seen] == [math.inf, math.inf]  # (d) plain: no deadline
    stats = worker.statistics()
    assert stats.completed == 2 and stats.cancelled == 0


async def test_a_stop_that_comes_after_the_handler_returned_reaches_no_other_job(
    redis_url: str, queue: str
) -> None:
    """Once its handler returned, a job's stops no longer reach the slot scope: the next
    job of the same slot task runs in it and is not cancelled by them."""
    q = echomq.Queue(queue, url=redis_url)
    waiting, gate = trio.Event(), trio.Event()
    helds: dict[int, Held] = {}
    worker = echomq.Worker(q, concurrency=1)

    @q.task
    async def step(n: int) -> int:
        helds[n] = worker.inflight.get(echomq.current_job().id)
        if n == 1:
            waiting.set()
            await gate.wait()
            await trio.lowlevel.checkpoint()
        return n

    with trio.fail_after(10):
        async with q.open(), serving(worker):
            assert await (await step.delay(0)).result(timeout=5) == 0
            second = await step.delay(1)
            await waiting.wait()
            assert helds[0].slot is helds[1].slot  # the same slot task
            helds[0].cancel("late")  # (as a keeper or an escalator holding it still would)
            helds[0].lose()
            helds[0].fence()
            gate.set()
            assert await second.result(timeout=5) == 1
    stats = worker.statistics()
    assert stats.completed == 2 and stats.cancelled == 0 and stats.lost == 0


@pytest.mark.parametrize("stop", ["cancel", "lose", "fence"])
async def test_a_job_stopped_in_the_slot_scope_settles_as_before_and_the_next_gets_a_fresh_one(
    redis_url: str, queue: str, stop: str
) -> None:
    """(b) The slot scope catches the handler's Cancelled: a cancel request completes it
    ``cancelled:<reason>``, a lost lease or a fence leaves it unsettled (as with a scope of
    its own); the same slot task then runs the next jobs, the first one cancelled again."""
    q = echomq.Queue(queue, url=redis_url)
    running: list[str] = []
    seen: list[tuple[str, int]] = []

    @q.task(max_attempts=3)
    async def work(n: int) -> int:
        running.append(echomq.current_job().id)
        seen.append((echomq.current_job().id, _slot_task()))
        if n < 0:
            await trio.sleep_forever()
        await trio.lowlevel.checkpoint()
        return n

    worker = echomq.Worker(q, concurrency=1)
    with trio.fail_after(10):
        async with q.open(), serving(worker):
            stopped = await work.delay(-1)
            await until(lambda: stopped.id in running)
            held = worker.inflight.get(stopped.id)
            if stop == "cancel":
                worker.inflight.request_cancel(stopped.id, "stop")
                with pytest.raises(JobCancelled) as caught:
                    await stopped.result(timeout=5)
                assert caught.value.reason == "stop"
            elif stop == "lose":
                worker.inflight.lose(stopped.id, held.token)
                await until(lambda: worker.statistics().lost == 1)
            else:
                worker.inflight.request_cancel(stopped.id, None, fenced=True)
                await until(lambda: worker.statistics().cancelled == 1)
            assert await (await work.delay(1)).result(timeout=5) == 1
            again = await work.delay(-2)  # in the fresh scope: cancelled the same way
            await until(lambda: again.id in running)
            worker.inflight.request_cancel(again.id, "again")
            with pytest.raises(JobCancelled):
                await again.result(timeout=5)
            assert await (await work.delay(2)).result(timeout=5) == 2
    assert len({task for _, task in seen}) == 1  # one slot task ran them all
    stats = worker.statistics()
    assert stats.completed == 2 and stats.retried == 0
    assert stats.cancelled == (1 if stop == "lose" else 2) and stats.lost == (stop == "lose")


async def test_nurseries_scopes_and_shielded_sections_nest_in_the_slot_scope(
    redis_url: str, queue: str
) -> None:
    """(c) An inner scope's own timeout stays inside the job; a cancel reaches a nursery's
    children, waits for ``job.shielded()``, and stops the handler after it."""
    q = echomq.Queue(queue, url=redis_url)
    steps: list[str] = []

    async def child() -> None:
        try:
            await trio.sleep_forever()
        finally:
            steps.append("child stopped")

    @q.task
    async def nested(job: echomq.Job, n: int) -> str:
        if n == 0:
            with trio.move_on_after(0.01) as inner:
                await trio.sleep_forever()
            assert inner.cancelled_caught
            return "inner timed out"
        if n == 2:
            await trio.lowlevel.checkpoint()
            return "after"
        async with trio.open_nursery() as nursery:
            nursery.start_soon(child)
            with job.shielded():
                steps.append("shield entered")
                await until(lambda: job.cancelled)
                await trio.sleep(0.01)  # still inside: not interrupted
                steps.append("shield finished")
            await trio.sleep_forever()
        steps.append("past the checkpoint")
        return "not reached"

    worker = echomq.Worker(q, concurrency=1)
    with trio.fail_after(10):
        async with q.open(), serving(worker):
            assert await (await nested.delay(0)).result(timeout=5) == "inner timed out"
            handle = await nested.delay(1)
            await until(lambda: "shield entered" in steps)
            worker.inflight.request_cancel(handle.id, "stop")
            with pytest.raises(JobCancelled):
                await handle.result(timeout=5)
            assert await (await nested.delay(2)).result(timeout=5) == "after"
    assert steps == ["shield entered", "child stopped", "shield finished"]  # (not past it)


async def test_a_job_that_waits_keeps_its_slot_tasks_scope_to_itself(
    redis_url: str, queue: str
) -> None:
    """(e) Jobs that wait go off duty, each in its own slot task and slot scope: cancelling
    one stops only it; the other, and the jobs run meanwhile, complete."""
    q = echomq.Queue(queue, url=redis_url)
    gates = {1: trio.Event(), 2: trio.Event()}
    tasks: dict[int, int] = {}

    @q.task
    async def wait(n: int) -> int:
        tasks[n] = _slot_task()
        if n in gates:
            await gates[n].wait()
        await trio.lowlevel.checkpoint()
        return n

    worker = echomq.Worker(q, concurrency=3)
    with trio.fail_after(10):
        async with q.open(), serving(worker):
            one, two = await wait.delay(1), await wait.delay(2)
            await until(lambda: 1 in tasks and 2 in tasks)
            assert await (await wait.delay(3)).result(timeout=5) == 3
            worker.inflight.request_cancel(one.id, "one")
            with pytest.raises(JobCancelled):
                await one.result(timeout=5)
            assert await (await wait.delay(4)).result(timeout=5) == 4
            gates[2].set()
            assert await two.result(timeout=5) == 2
    assert tasks[1] != tasks[2]
    assert worker.statistics().completed == 3 and worker.statistics().cancelled == 1


async def test_a_job_cancelled_before_it_starts_runs_in_its_own_cancelled_scope(
    redis_url: str, queue: str
) -> None:
    """A cancel that reached a job before it started: it runs in its own, cancelled scope
    (a handler with no checkpoint completes normally; one with a checkpoint is cancelled),
    and the slot task's slot scope is untouched for the next job."""
    q = echomq.Queue(queue, url=redis_url)
    waiting, gate = trio.Event(), trio.Event()

    @q.task
    async def job(n: int) -> int:
        if n == 0:
            waiting.set()
            await gate.wait()
        elif n == 2:
            await trio.lowlevel.checkpoint()
        return n

    worker = echomq.Worker(q, concurrency=1, prefetch=0)
    with trio.fail_after(10):
        async with q.open(), serving(worker):
            busy = await job.delay(0)
            await waiting.wait()
            quiet, awaits = await job.delay(1), await job.delay(2)
            assert not worker.inflight.request_cancel(quiet.id, "early")  # kept for its claim
            assert not worker.inflight.request_cancel(awaits.id, "early")
            gate.set()
            assert await busy.result(timeout=5) == 0
            assert await quiet.result(timeout=5) == 1
            with pytest.raises(JobCancelled):
                await awaits.result(timeout=5)
            assert await (await job.delay(3)).result(timeout=5) == 3
    stats = worker.statistics()
    assert stats.completed == 3 and stats.cancelled == 1
