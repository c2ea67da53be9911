"""Durable steps (docs/steps.md): a step runs once per job, across retries, recoveries and
durable sleeps; its record is fenced by the claim's token and kept in the job's row."""

from __future__ import annotations

import os
import signal
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import trio

import echomq
from echomq import config, jobs
from echomq._model.steps import StepRecord
from echomq.cli import explain_text
from echomq.errors import (
    DuplicateStep,
    InvalidArgument,
    JobFailed,
    PayloadTooLarge,
    StaleToken,
)
from echomq.jobs import steps as step_verbs
from echomq.testing import kill_worker, wait_running

from ._runtime import serving, until, wait_state, worker_process


async def test_a_step_runs_once_across_retries(redis_url: str, queue: str) -> None:
    q = echomq.Queue(queue, url=redis_url)
    calls: dict[str, int] = {}

    async def effect(name: str) -> str:
        calls[name] = calls.get(name, 0) + 1
        return name.upper()

    def plain(name: str) -> str:  # a plain function is a step too
        calls[name] = calls.get(name, 0) + 1
        return name

    @q.task(max_attempts=3, backoff=0)
    async def flaky(job: echomq.Job) -> list[str]:
        one = await job.step("one", effect, "one")
        two = await job.step("two", plain, "two")
        if job.attempt == 1:
            raise RuntimeError("the network went away")
        three = await job.step("three", effect, "three")
        return [one, two, three]

    with trio.fail_after(20):
        async with q.open(), serving(echomq.Worker(q, concurrency=1)):
            handle = await flaky.delay()
            assert await handle.result(timeout=10) == ["ONE", "two", "THREE"]
            info = await handle.info()
            steps = await step_verbs.read_steps(q.connection, queue, handle.id)
    assert calls == {"one": 1, "two": 1, "three": 1}
    assert info is not None and info.failures == 1
    assert sorted(steps) == ["one", "three", "two"]
    assert {r.state for r in steps.values()} == {"done"}
    assert steps["one"].token == 1 and steps["three"].token == 2


async def test_a_step_that_raises_commits_nothing_unless_told_to_keep_the_error(
    redis_url: str, queue: str
) -> None:
    q = echomq.Queue(queue, url=redis_url)
    calls = {"flaky": 0, "declined": 0}

    class Declined(Exception):
        pass

    async def flaky() -> str:
        calls["flaky"] += 1
        if calls["flaky"] == 1:
            raise TimeoutError("slow API")
        return "ok"

    async def charge() -> None:
        calls["declined"] += 1
        raise Declined("card declined")

    @q.task(max_attempts=3, backoff=0)
    async def retried(job: echomq.Job) -> str:
        return await job.step("call", flaky)

    @q.task(max_attempts=3, backoff=0)
    async def declined(job: echomq.Job) -> None:
        await job.step_keeping_errors("charge", (Declined,), charge)

    with trio.fail_after(20):
        async with q.open(), serving(echomq.Worker(q, concurrency=1)):
            assert await (await retried.delay()).result(timeout=10) == "ok"
            handle = await declined.delay()
            with pytest.raises(JobFailed) as caught:
                await handle.result(timeout=10)
    assert calls == {"flaky": 2, "declined": 1}  # the kept error is replayed, not re-run
    assert caught.value.error is not None
    assert caught.value.error.startswith("StepFailed: step 'charge' failed in an earlier run")
    assert "Declined: card declined" in caught.value.error


async def test_a_name_used_twice_in_one_run_is_a_typed_error(redis_url: str, queue: str) -> None:
    q = echomq.Queue(queue, url=redis_url)
    seen: list[BaseException] = []

    async def nothing() -> None:
        return None

    @q.task(max_attempts=1)
    async def twice(job: echomq.Job) -> None:
        await job.step("same", nothing)
        for bad in ("same", "", "x" * 201, "a\nb", 7):
            try:
                await job.step(bad, nothing)  # type: ignore[arg-type]
            except InvalidArgument as exc:
                seen.append(exc)

    with trio.fail_after(20):
        async with q.open(), serving(echomq.Worker(q, concurrency=1)):
            await (await twice.delay()).result(timeout=10)
    assert isinstance(seen[0], DuplicateStep)
    assert len(seen) == 5


async def test_a_step_value_over_the_payload_limit_is_a_typed_error(
    redis_url: str, queue: str
) -> None:
    q = echomq.Queue(queue, url=redis_url)
    limit = config.max_payload()

    def big() -> str:
        return "x" * 4096

    @q.task(max_attempts=1)
    async def huge(job: echomq.Job) -> None:
        await job.step("big", big)

    config.set_max_payload(1024)
    try:
        with trio.fail_after(20):
            async with q.open(), serving(echomq.Worker(q, concurrency=1)):
                handle = await huge.delay()
                with pytest.raises(JobFailed) as caught:
                    await handle.result(timeout=10)
                steps = await step_verbs.read_steps(q.connection, queue, handle.id)
    finally:
        config.set_max_payload(limit)
    assert caught.value.error is not None and caught.value.error.startswith("PayloadTooLarge")
    assert steps == {}
    with pytest.raises(PayloadTooLarge):  # the verb refuses before any I/O
        config.set_max_payload(1024)
        try:
            step_verbs.commit_step_call(
                queue, "j", 1, StepRecord(name="big", state="done", token=1, value=b"x" * 4096)
            )
        finally:
            config.set_max_payload(limit)


async def test_a_stale_holder_cannot_commit_a_step(conn: echomq.Connection, queue: str) -> None:
    job_id = await jobs.enqueue(conn, queue, b"{}")
    (claimed,) = await jobs.claim(conn, queue, 30_000)
    record = StepRecord(name="charge", state="done", token=claimed.token, value=b'"ok"')
    with pytest.raises(StaleToken):
        await step_verbs.commit_step(conn, queue, job_id, claimed.token + 1, record)
    assert await step_verbs.read_steps(conn, queue, job_id) == {}
    assert await step_verbs.commit_step(conn, queue, job_id, claimed.token, record) is True
    other = StepRecord(name="charge", state="done", token=claimed.token, value=b'"again"')
    assert await step_verbs.commit_step(conn, queue, job_id, claimed.token, other) is False
    stored = await step_verbs.read_steps(conn, queue, job_id)
    assert stored["charge"].value == b'"ok"'  # a record is never replaced


async def test_a_job_of_a_hundred_steps(redis_url: str, queue: str) -> None:
    q = echomq.Queue(queue, url=redis_url)
    calls: list[int] = []

    async def square(n: int) -> int:
        calls.append(n)
        return n * n

    @q.task(max_attempts=2, backoff=0)
    async def many(job: echomq.Job) -> int:
        total = 0
        for n in range(100):
            total += await job.step(f"square-{n}", square, n)
            if n == 60 and job.attempt == 1:
                raise RuntimeError("halfway")
        return total

    with trio.fail_after(30):
        async with q.open(), serving(echomq.Worker(q, concurrency=1)):
            handle = await many.delay()
            assert await handle.result(timeout=20) == sum(n * n for n in range(100))
    assert sorted(calls) == list(range(100))


async def test_a_durable_sleep_frees_the_slot_and_resumes_after_it(
    redis_url: str, queue: str
) -> None:
    q = echomq.Queue(queue, url=redis_url)
    calls: list[str] = []

    async def effect(name: str) -> str:
        calls.append(name)
        return name

    @q.task()
    async def napper(job: echomq.Job) -> list[str]:
        before = await job.step("before", effect, "before")
        await job.sleep("nap", timedelta(seconds=1))
        after = await job.step("after", effect, "after")
        return [before, after, job.step_key("after")]

    @q.task()
    async def quick() -> str:
        return "quick"

    with trio.fail_after(30):
        async with q.open(), serving(echomq.Worker(q, concurrency=1)):
            handle = await napper.delay()
            info = await wait_state(q.connection, queue, handle.id, "scheduled")
            # its one slot is free while it sleeps: another job runs
            assert await (await quick.delay()).result(timeout=5) == "quick"
            assert calls == ["before"]
            result = await handle.result(timeout=10)
            done = await handle.info()
    assert result[:2] == ["before", "after"]
    assert result[2].startswith("emq-") and len(result[2]) == 44
    assert calls == ["before", "after"]
    assert info.failures == 0 and done is not None and done.failures == 0
    assert done.token == 2  # the run after the sleep is a new claim


async def test_a_sync_task_uses_steps_from_its_thread(redis_url: str, queue: str) -> None:
    q = echomq.Queue(queue, url=redis_url)
    calls: list[int] = []

    def add(a: int, b: int) -> int:
        calls.append(a)
        return a + b

    @q.task(max_attempts=2, backoff=0)
    def blocking(job: echomq.Job) -> int:
        first = job.step_sync("add", add, 1, 2)
        if job.attempt == 1:
            raise RuntimeError("again")
        return first + job.step_sync("add-more", add, 10, 20)

    with trio.fail_after(20):
        async with q.open(), serving(echomq.Worker(q, concurrency=1)):
            assert await (await blocking.delay()).result(timeout=10) == 33
    assert calls == [1, 10]


@pytest.mark.single_node("a worker subprocess on the private server")
async def test_kill_9_between_steps_two_and_three_runs_each_step_once(
    redis_url: str, queue: str, tmp_path: Path
) -> None:
    q = echomq.Queue(queue, url=redis_url)

    @q.task(name="stepped", lease=0.3)
    async def stepped(job: echomq.Job, block: bool) -> list[str]:  # the rescuer's copy
        async def effect(name: str) -> str:
            await job.log(f"effect {name}")
            return name

        done = [await job.step("one", effect, "one"), await job.step("two", effect, "two")]
        done.append(await job.step("three", effect, "three"))
        return done

    async def logged() -> list[str]:
        return [line for line in await jobs.get_job_logs(q.connection, queue, handle.id)]

    with trio.fail_after(30):
        async with q.open():
            handle = await stepped.delay(True)
            log = tmp_path / "worker.log"
            async with worker_process(
                redis_url, queue, log, lease=0.3, recovery_interval=0.1
            ) as proc:
                await wait_running(handle)

                async def two_committed() -> bool:
                    steps = await step_verbs.read_steps(q.connection, queue, handle.id)
                    return "two" in steps

                await until(two_committed, 10)
                assert await kill_worker(proc) == -signal.SIGKILL
            rescuer = echomq.Worker(q, recovery="stalled", recovery_interval=0.05, max_stalled=2)
            async with serving(rescuer):
                assert await handle.result(timeout=10) == ["one", "two", "three"]
            lines = await logged()
    assert [line.split("effect ", 1)[1] for line in lines if "effect " in line] == [
        "one",
        "two",
        "three",
    ]


@pytest.mark.single_node("the CLI subprocess reads the private server")
async def test_steps_show_in_explain_and_in_the_job_command(redis_url: str, queue: str) -> None:
    q = echomq.Queue(queue, url=redis_url)

    async def one() -> int:
        return 1

    @q.task()
    async def shown(job: echomq.Job) -> int:
        value = await job.step("fetch", one)
        await job.sleep("nap", 0.2)
        return value + await job.step("store", one)

    with trio.fail_after(30):
        async with q.open(), serving(echomq.Worker(q, concurrency=1)):
            handle = await shown.delay()
            assert await handle.result(timeout=10) == 2
            e = await jobs.explain(q.connection, queue, handle.id)
            env = {**os.environ, "ECHOMQ_URL": redis_url}
            done = await trio.run_process(
                [sys.executable, "-m", "echomq", "job", handle.id, "-q", queue],
                capture_stdout=True, capture_stderr=True, check=False, env=env,
            )  # fmt: skip
    assert [r.name for r in e.steps] == ["fetch", "nap", "store"]
    lines = [value for label, value in explain_text.facts(e) if label == "step"]
    assert lines[0].startswith("fetch: done in ") and lines[0].endswith("(token 1)")
    assert lines[1].startswith("nap: slept until ")
    assert lines[2].startswith("store: done in ") and lines[2].endswith("(token 2)")
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()
    assert "steps (3):" in out and "fetch: done in" in out and "nap: slept until" in out
