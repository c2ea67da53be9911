"""Worker.serve in-process: results, the Job context, retries, timeouts, order, batching."""

from __future__ import annotations

import itertools
import threading

import pytest
import trio

import echomq
from echomq import jobs
from echomq.errors import InvalidArgument, JobFailed

from ._runtime import serving, until, wait_state


async def test_delay_runs_the_task_and_result_answers_its_value(redis_url: str, queue: str) -> None:
    """A coroutine task runs on the worker and result() answers its return value."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task
    async def add(a: int, b: int) -> int:
        return a + b

    with trio.fail_after(5):
        async with q.open(), serving(echomq.Worker(q)):
            handle = await add.delay(2, b=3)
            assert await handle.result(timeout=5) == 5
            info = await handle.info()
            assert info is not None and info.state == "completed" and info.token == 1


async def test_job_context_writes_progress_and_logs(redis_url: str, queue: str) -> None:
    """A task whose first parameter is a Job gets it: progress and log reach the row."""
    q = echomq.Queue(queue, url=redis_url)
    seen: list[tuple[str, int, int, bool]] = []

    @q.task(max_attempts=3)
    async def report(job: echomq.Job, label: str) -> str:
        await job.progress(50)
        await job.log(f"working on {label}")
        seen.append((job.id, job.attempt, job.token, echomq.current_job() is job))
        return label

    with trio.fail_after(5):
        async with q.open(), serving(echomq.Worker(q)):
            handle = await report.delay("x")
            assert await handle.result(timeout=5) == "x"
            info = await handle.info()
            logs = await jobs.get_job_logs(q.connection, queue, handle.id)
    assert seen == [(handle.id, 1, 1, True)]
    assert info is not None and info.progress == "50"
    assert logs == ["working on x"]


async def test_current_job_in_a_task_that_does_not_take_it(redis_url: str, queue: str) -> None:
    """current_job() inside an async task without a Job parameter (its Job is made when
    first asked for): the job's own values, and the same Job at every call."""
    q = echomq.Queue(queue, url=redis_url)
    seen: list[tuple[str, str, int, int, bool, bool]] = []

    @q.task(max_attempts=2)
    async def plain(n: int) -> int:
        job = echomq.current_job()
        await trio.lowlevel.checkpoint()
        seen.append(
            (job.id, job.task, job.attempt, job.token, echomq.current_job() is job, job.cancelled)
        )
        return n

    with trio.fail_after(5):
        async with q.open(), serving(echomq.Worker(q)):
            handles = [await plain.delay(i) for i in range(3)]
            assert [await h.result(timeout=5) for h in handles] == [0, 1, 2]
    assert sorted(seen) == sorted((h.id, plain.name, 1, 1, True, False) for h in handles)


async def test_plain_function_runs_in_a_thread_with_current_job(redis_url: str, queue: str) -> None:
    """A sync task runs off the Trio thread, and current_job() works inside it."""
    q = echomq.Queue(queue, url=redis_url)
    main_thread = threading.get_ident()

    @q.task
    def where() -> list[object]:
        return [threading.get_ident() != main_thread, echomq.current_job().task]

    with trio.fail_after(5):
        async with q.open(), serving(echomq.Worker(q)):
            assert await (await where.delay()).result(timeout=5) == [True, where.name]


async def test_failures_retry_with_backoff_then_dead(redis_url: str, queue: str) -> None:
    """A failing task is retried after its backoff, then dead; result() raises JobFailed."""
    q = echomq.Queue(queue, url=redis_url)
    attempts: list[tuple[int, float]] = []

    @q.task(max_attempts=3, backoff=lambda failures: 0.1 * failures)
    async def flaky(job: echomq.Job) -> None:
        attempts.append((job.attempt, trio.current_time()))
        raise ValueError(f"boom {job.attempt}")

    with trio.fail_after(10):
        async with q.open(), serving(echomq.Worker(q)):
            handle = await flaky.delay()
            with pytest.raises(JobFailed) as caught:
                await handle.result(timeout=8)
            info = await handle.info()
            logs = await jobs.get_job_logs(q.connection, queue, handle.id)
    assert caught.value.error == "ValueError: boom 3"
    assert [a for a, _ in attempts] == [1, 2, 3]
    gaps = [later - earlier for (_, earlier), (_, later) in itertools.pairwise(attempts)]
    assert gaps[0] >= 0.09 and gaps[1] >= 0.19  # 0.1 s after the first failure, 0.2 s after
    assert info is not None and info.state == "dead" and info.failures == 3
    assert len(logs) == 3 and "ValueError: boom 1" in logs[0]  # a traceback per failure


async def test_retry_asks_for_another_attempt_after_its_delay(redis_url: str, queue: str) -> None:
    """raise Retry(delay=) schedules the next attempt; it counts as a failure."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task(max_attempts=2)
    async def patient(job: echomq.Job) -> int:
        if job.attempt == 1:
            raise echomq.Retry(delay=0.05)
        return job.attempt

    with trio.fail_after(5):
        async with q.open(), serving(echomq.Worker(q)):
            handle = await patient.delay()
            assert await handle.result(timeout=5) == 2
            info = await handle.info()
    assert info is not None and info.failures == 1 and info.last_error == "Retry: retry requested"


async def test_timeout_fails_the_attempt(redis_url: str, queue: str) -> None:
    """A task past its timeout= fails (and is dead at max_attempts=1)."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task(timeout=0.1)
    async def slow() -> None:
        await trio.sleep(5)

    with trio.fail_after(5):
        async with q.open(), serving(echomq.Worker(q)):
            with pytest.raises(JobFailed) as caught:
                await (await slow.delay()).result(timeout=5)
    assert caught.value.error is not None and caught.value.error.startswith("TimeoutError")


async def test_unknown_task_fails_the_job_and_the_worker_lives(redis_url: str, queue: str) -> None:
    """A job naming an unregistered task fails with that reason; later jobs still run."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task
    async def known() -> str:
        return "ok"

    with trio.fail_after(5):
        async with q.open(), serving(echomq.Worker(q)):
            payload = q.codec.encode_call("nobody.home", [], {})
            stray = await jobs.enqueue(q.connection, queue, payload)
            with pytest.raises(JobFailed) as caught:
                await q.handle(stray).result(timeout=5)
            assert await (await known.delay()).result(timeout=5) == "ok"
    assert "TaskNotRegistered" in str(caught.value.error)
    assert "nobody.home" in str(caught.value.error)


async def test_higher_priority_runs_first(redis_url: str, queue: str) -> None:
    """With one slot, the backlog runs by priority (higher first), FIFO within one."""
    q = echomq.Queue(queue, url=redis_url)
    order: list[str] = []

    @q.task
    async def mark(label: str) -> None:
        order.append(label)

    with trio.fail_after(5):
        async with q.open():
            await mark.apply(("low-1",), priority=-1)
            await mark.apply(("mid-1",))
            await mark.apply(("high",), priority=5)
            last = await mark.apply(("mid-2",))
            async with serving(echomq.Worker(q, concurrency=1)):
                await last.result(timeout=5)
                await wait_state(q.connection, queue, last.id, "completed")
                await until(lambda: len(order) == 4)
    assert order == ["high", "mid-1", "mid-2", "low-1"]


async def test_delayed_job_runs_once_due(redis_url: str, queue: str) -> None:
    """apply(delay=) holds the job until due; the idle worker wakes for it."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task
    async def stamp() -> float:
        return trio.current_time()

    with trio.fail_after(5):
        async with q.open(), serving(echomq.Worker(q)):
            start = trio.current_time()
            handle = await stamp.apply(delay=0.3)
            info = await handle.info()
            assert info is not None and info.state == "scheduled"
            ran_at = await handle.result(timeout=5)
    assert ran_at - start >= 0.29


async def test_concurrency_bounds_the_jobs_held_at_once(redis_url: str, queue: str) -> None:
    """No more than `concurrency` jobs run at once; every job completes."""
    q = echomq.Queue(queue, url=redis_url)
    running = 0
    peak = 0

    @q.task
    async def busy() -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await trio.sleep(0.02)
        running -= 1

    with trio.fail_after(10):
        async with q.open():
            handles = [await busy.delay() for _ in range(20)]
            worker = echomq.Worker(q, concurrency=4)
            async with serving(worker):
                for handle in handles:
                    await handle.result(timeout=5)
    assert peak == 4
    assert worker.statistics().completed == 20


async def test_worker_refuses_bad_options_before_any_io(closed_port_url: str) -> None:
    """Bad Worker options raise InvalidArgument at construction."""
    q = echomq.Queue("bad-options", url=closed_port_url)
    for options in (
        {"concurrency": 0},
        {"recovery": "sometimes"},
        {"recovery_interval": 0},
        {"max_stalled": 0},
        {"grace": -1},
    ):
        with pytest.raises(InvalidArgument):
            echomq.Worker(q, **options)  # type: ignore[arg-type]
