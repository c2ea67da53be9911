"""The scheduler side in workers (docs/repeat.md): every worker runs it, each slot runs once."""

from __future__ import annotations

import datetime as dt

import trio

import echomq
from echomq import repeat

from ._runtime import serving, until


async def test_a_repeatable_task_is_registered_and_runs_on_its_schedule(
    redis_url: str, queue: str
) -> None:
    """@queue.task(every=...) is registered by the worker at start, then runs per slot."""
    q = echomq.Queue(queue, url=redis_url)
    ran: list[str] = []

    @q.task(name="beat", every=dt.timedelta(milliseconds=40))
    async def beat(job: echomq.Job) -> None:
        ran.append(job.id)

    with trio.fail_after(10):
        async with q.open(), serving(echomq.Worker(q)) as worker:
            await until(lambda: len(ran) >= 3)
            info = await repeat.get(q.connection, queue, "beat")
            assert (info.source, info.task, info.schedule.every_ms) == ("task", "beat", 40)
            assert worker.statistics().repeats_fired >= 3
    assert len(ran) == len(set(ran)) and all(job_id.startswith("beat~") for job_id in ran)


async def test_three_workers_enqueue_each_slot_once(redis_url: str, queue: str) -> None:
    """Three schedulers, one queue.repeat: one job per slot, every slot accounted for."""
    q = echomq.Queue(queue, url=redis_url)
    ran: list[tuple[str, int]] = []

    @q.task(name="work")
    async def work(n: int) -> None:
        ran.append((echomq.current_job().id, n))

    with trio.fail_after(15):
        async with q.open(), trio.open_nursery() as nursery:
            workers = [echomq.Worker(q, concurrency=4) for _ in range(3)]
            for worker in workers:
                await nursery.start(worker.serve)
            added = await q.repeat(work, every=0.03, args=(7,), key="k")
            await until(lambda: len(ran) >= 10)
            for worker in workers:
                worker.shutdown(grace=1)
    ids = [job_id for job_id, _ in ran]
    assert len(ids) == len(set(ids)) and {n for _, n in ran} == {7}
    fired = sum(w.statistics().repeats_fired for w in workers)
    async with q.open():
        record = await repeat.get(q.connection, queue, "k")
    assert record.runs == fired >= len(ran)
    last = max(int(job_id.split("~")[1]) for job_id in ids)
    assert record.runs + record.coalesced >= (last - added.next_ms) // 30 + 1


async def test_adding_a_repeatable_wakes_an_idle_scheduler(redis_url: str, queue: str) -> None:
    """An idle scheduler sleeps up to 5 s; the `repeat` event of an add wakes it at once."""
    q = echomq.Queue(queue, url=redis_url)
    ran = trio.Event()

    @q.task(name="once")
    async def once() -> None:
        ran.set()

    async with q.open(), serving(echomq.Worker(q)) as worker:
        await until(lambda: worker._repeater is not None and worker._repeater.passes >= 1)
        with trio.fail_after(2):  # well under the scheduler's 5 s idle sleep
            await q.repeat(once, cron="* * * * *", key="minutely")
            await q.repeat(once, every=0.02, key="fast")
            await ran.wait()


async def test_a_worker_with_the_scheduler_off_leaves_runs_to_others(
    redis_url: str, queue: str
) -> None:
    q = echomq.Queue(queue, url=redis_url)
    ran: list[str] = []

    @q.task(name="job", every=0.03)
    async def job() -> None:
        ran.append(echomq.current_job().id)

    with trio.fail_after(10):
        async with q.open(), trio.open_nursery() as nursery:
            off = echomq.Worker(q, scheduler=False)
            on = echomq.Worker(q)
            await nursery.start(off.serve)
            await nursery.start(on.serve)
            await until(lambda: len(ran) >= 3)
            off.shutdown(grace=0)
            on.shutdown(grace=0)
    assert off.statistics().repeats_fired == 0 and off._repeater is None
    assert on.statistics().repeats_fired >= 3
