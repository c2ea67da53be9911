"""A job's failure is never the worker's: poison payloads, results, options and errors.

Each test serves a real worker in-process against the session's redis-server, feeds it one
kind of poison, checks that the job ends dead with its reason, and then checks that the
same worker still completes a healthy job (an error escaping ``serve`` would fail the test).
"""

from __future__ import annotations

import math
import sys
from typing import Any

import pytest
import trio

import echomq
from echomq import jobs
from echomq._model.backoff import MAX_DELAY
from echomq._model.codec import JsonCodec
from echomq._scripts.calls import is_sharded
from echomq._worker import settle
from echomq._worker.outcome import MAX_ERROR_TEXT
from echomq.app import Task
from echomq.errors import InvalidArgument, JobFailed, ScriptError, ServerError
from echomq.jobs.rows import MAX_LOG_LINE

from ._runtime import serving, until, wait_state

DEEP = 5_000  # nesting that no recursive JSON codec can take


def deep_list(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


def deep_payload(task: str, depth: int = DEEP) -> bytes:
    """A valid JSON call whose one argument is nested ``depth`` deep (a non-Python producer)."""
    return b'{"task":"' + task.encode() + b'","args":[' + b"[" * depth + b"]" * depth + b"]}"


async def dead_error(q: echomq.Queue, job_id: str, within: float = 5.0) -> str:
    """Wait for the job to be dead; answer its last error."""
    with pytest.raises(JobFailed) as caught:
        await q.handle(job_id).result(timeout=within)
    assert caught.value.error is not None
    return caught.value.error


def healthy_queue(queue: str, redis_url: str) -> tuple[echomq.Queue, Task]:
    q = echomq.Queue(queue, url=redis_url)

    @q.task(name="ok")
    async def ok(n: int = 0) -> int:
        return n + 1

    return q, ok


async def still_serves(ok: Task) -> None:
    assert await (await ok.delay(41)).result(timeout=5) == 42


# -- payloads and results that cannot be decoded or encoded ----------------------------------


async def test_deeply_nested_payload_is_dead_and_the_worker_lives(
    redis_url: str, queue: str
) -> None:
    """A payload nested 5,000 deep (valid JSON) fails its job at once; RecursionError stays in."""
    q, ok = healthy_queue(queue, redis_url)
    with trio.fail_after(10):
        async with q.open(), serving(echomq.Worker(q)):
            job_id = await jobs.enqueue(q.connection, queue, deep_payload("ok"))
            error = await dead_error(q, job_id)
            await still_serves(ok)
    assert error.startswith("SerializationError: payload is not an echomq call")
    assert "nested too deeply" in error


async def test_payload_replaced_by_update_data_is_dead_and_the_worker_lives(
    redis_url: str, queue: str
) -> None:
    """update_data with a deeply nested payload: the same, dead with the reason."""
    q, ok = healthy_queue(queue, redis_url)
    with trio.fail_after(10):
        async with q.open():
            handle = await ok.apply(delay=0.2)
            await jobs.update_data(q.connection, queue, handle.id, deep_payload("ok"))
            async with serving(echomq.Worker(q)):
                error = await dead_error(q, handle.id)
                await still_serves(ok)
    assert "nested too deeply" in error


async def test_binary_garbage_payload_is_dead(redis_url: str, queue: str) -> None:
    """Bytes that are not UTF-8 JSON fail the job as undecodable."""
    q, ok = healthy_queue(queue, redis_url)
    with trio.fail_after(10):
        async with q.open(), serving(echomq.Worker(q)):
            job_id = await jobs.enqueue(q.connection, queue, b"\xff\xfe\x00garbage\x80")
            error = await dead_error(q, job_id)
            await still_serves(ok)
    assert error.startswith("SerializationError")


async def test_deeply_nested_result_is_dead_and_the_worker_lives(
    redis_url: str, queue: str
) -> None:
    """A task returning a value nested too deeply to encode: dead, the result cannot be stored."""
    q, ok = healthy_queue(queue, redis_url)

    @q.task(name="deep", max_attempts=3)
    async def deep() -> Any:
        return deep_list(DEEP)

    with trio.fail_after(10):
        async with q.open(), serving(echomq.Worker(q)):
            handle = await deep.delay()
            error = await dead_error(q, handle.id)
            info = await handle.info()
            await still_serves(ok)
    assert error.startswith("SerializationError: result cannot be encoded")
    assert "nested too deeply" in error
    assert info is not None and info.failures == 1  # dead at once: a retry cannot help


async def test_a_codec_that_raises_anything_fails_the_job(redis_url: str, queue: str) -> None:
    """A custom codec raising an arbitrary error (not SerializationError) fails the job, dead."""

    class Fussy(JsonCodec):
        def encode_result(self, value: Any) -> bytes:
            if value == "odd":
                raise KeyError("the codec has a bug")
            return super().encode_result(value)

    q = echomq.Queue(queue, url=redis_url, codec=Fussy())

    @q.task(name="answer")
    async def answer(value: str) -> str:
        return value

    with trio.fail_after(10):
        async with q.open(), serving(echomq.Worker(q)):
            error = await dead_error(q, (await answer.delay("odd")).id)
            assert await (await answer.delay("even")).result(timeout=5) == "even"
    assert error == "KeyError: 'the codec has a bug' (the result could not be encoded)"


# -- retries that cannot be scheduled ---------------------------------------------------------


@pytest.mark.parametrize(
    ("delay", "why"),
    [
        (math.inf, "inf"),
        (math.nan, "nan"),
        ("soon", "'soon'"),
        (1e12, "1000000000000.0"),
    ],
)
async def test_retry_with_a_delay_that_cannot_be_scheduled_is_dead(
    redis_url: str, queue: str, delay: Any, why: str
) -> None:
    """raise Retry(delay=inf | nan | "soon" | 1e12): the job is dead with the reason."""
    q, ok = healthy_queue(queue, redis_url)

    @q.task(name="asks", max_attempts=5)
    async def asks() -> None:
        raise echomq.Retry(delay=delay, reason="later please")

    with trio.fail_after(10):
        async with q.open(), serving(echomq.Worker(q)):
            handle = await asks.delay()
            error = await dead_error(q, handle.id)
            info = await handle.info()
            await still_serves(ok)
    assert error.startswith("Retry: later please (not retried: the delay ")
    assert why in error
    assert info is not None and info.failures == 1


def _raises(failures: int) -> float:
    raise ZeroDivisionError("backoff bug")


@pytest.mark.parametrize(
    ("backoff", "why"),
    [
        (_raises, "backoff raised ZeroDivisionError: backoff bug"),
        (lambda failures: math.inf, "inf"),
        (lambda failures: math.nan, "nan"),
        (lambda failures: "soon", "'soon'"),
        (lambda failures: 2e9, "2000000000.0"),
    ],
)
async def test_backoff_that_cannot_give_a_delay_makes_the_job_dead(
    redis_url: str, queue: str, backoff: Any, why: str
) -> None:
    """A backoff callable that raises or answers inf / nan / a str / too much: dead, reason kept."""
    q, ok = healthy_queue(queue, redis_url)

    @q.task(name="flaky", max_attempts=5, backoff=backoff)
    async def flaky() -> None:
        raise ValueError("first failure")

    with trio.fail_after(10):
        async with q.open(), serving(echomq.Worker(q)):
            error = await dead_error(q, (await flaky.delay()).id)
            await still_serves(ok)
    assert error.startswith("ValueError: first failure (not retried: ")
    assert why in error


@pytest.mark.parametrize(
    "options",
    [
        {"backoff": 2e9},
        {"backoff": math.inf},
        {"backoff": math.nan},
        {"lease": 2e9},
        {"lease": 1e300},
        {"max_attempts": 10**9},
        {"timeout": 2e9},
    ],
)
def test_options_past_the_scripts_caps_are_refused_at_registration(
    queue: str, options: dict[str, Any]
) -> None:
    """Options are checked against the caps the scripts enforce, when the task is registered."""
    q = echomq.Queue(queue)
    with pytest.raises(InvalidArgument):
        q.task(name="capped", **options)(lambda: None)


def test_options_at_the_caps_are_accepted(queue: str) -> None:
    """The caps themselves are fine: ~34 years of delay, a million attempts."""
    q = echomq.Queue(queue)
    cap = MAX_DELAY
    task = q.task(name="at-cap", backoff=cap, lease=cap, timeout=cap, max_attempts=1_000_000)(
        lambda: None
    )
    assert task.options.max_attempts == 1_000_000


async def test_enqueue_refuses_max_attempts_past_the_cap(closed_port_url: str, queue: str) -> None:
    """apply(max_attempts=) and the enqueue verb refuse past the cap before any I/O."""
    q = echomq.Queue(queue, url=closed_port_url)
    task = q.task(name="t")(lambda: None)
    async with q.open():
        with pytest.raises(InvalidArgument):
            await task.apply(max_attempts=1_000_001)
        with pytest.raises(InvalidArgument):
            await jobs.enqueue(q.connection, queue, b"x", max_attempts=1_000_001)


# -- error texts and tracebacks past the limits ---------------------------------------------


async def test_huge_error_and_traceback_are_truncated_and_say_so(
    redis_url: str, queue: str
) -> None:
    """A 1 MB error message: last_error and the traceback log line are bounded, marked."""
    q, ok = healthy_queue(queue, redis_url)

    @q.task(name="loud")
    async def loud() -> None:
        raise ValueError("x" * 1_000_000 + "THE END")

    with trio.fail_after(10):
        async with q.open(), serving(echomq.Worker(q)):
            handle = await loud.delay()
            error = await dead_error(q, handle.id)
            logs = await jobs.get_job_logs(q.connection, queue, handle.id)
            await still_serves(ok)
    assert error.startswith("ValueError: xxx")
    assert len(error.encode()) <= MAX_ERROR_TEXT
    assert "[truncated 99" in error and error.endswith("chars]")
    (line,) = logs
    assert len(line.encode()) <= MAX_LOG_LINE
    assert line.startswith("Traceback (most recent call last):")
    assert "... [truncated " in line and line.endswith("THE END")  # head and tail kept


async def test_unprintable_errors_fail_their_job(redis_url: str, queue: str) -> None:
    """An error whose str() raises, or holds lone surrogates, still fails its job cleanly."""
    q, ok = healthy_queue(queue, redis_url)

    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no str for you")

    @q.task(name="unprintable")
    async def unprintable() -> None:
        raise Unprintable()

    @q.task(name="surrogates")
    async def surrogates() -> None:
        raise ValueError("bad \udcff bytes")

    with trio.fail_after(10):
        async with q.open(), serving(echomq.Worker(q)):
            first = await dead_error(q, (await unprintable.delay()).id)
            second = await dead_error(q, (await surrogates.delay()).id)
            await still_serves(ok)
    assert first == "Unprintable: <str() failed>"
    assert second == "ValueError: bad \\udcff bytes"


async def test_too_slow_raised_by_the_task_itself_is_a_plain_failure(
    redis_url: str, queue: str
) -> None:
    """trio.TooSlowError from the task's own fail_after (no timeout= set) fails the job."""
    q, ok = healthy_queue(queue, redis_url)

    @q.task(name="impatient")
    async def impatient() -> None:
        with trio.fail_after(0.01):
            await trio.sleep(1)

    with trio.fail_after(10):
        async with q.open(), serving(echomq.Worker(q)):
            error = await dead_error(q, (await impatient.delay()).id)
            await still_serves(ok)
    assert error == "TooSlowError"


async def test_job_cancelled_with_an_odd_reason_completes_as_cancelled(
    redis_url: str, queue: str
) -> None:
    """raise JobCancelled(<not a str>): the job completes as cancelled, the reason as text."""
    q, ok = healthy_queue(queue, redis_url)

    @q.task(name="gives-up")
    async def gives_up() -> None:
        raise echomq.JobCancelled(12345)  # type: ignore[arg-type]

    with trio.fail_after(10):
        async with q.open(), serving(echomq.Worker(q)):
            with pytest.raises(echomq.JobCancelled) as caught:
                await (await gives_up.delay()).result(timeout=5)
            await still_serves(ok)
    assert caught.value.reason == "12345"


# -- BaseExceptions raised inside tasks ------------------------------------------------------


async def _system_exit() -> None:
    sys.exit(3)


async def _keyboard_interrupt() -> None:
    raise KeyboardInterrupt


async def _base_group() -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.sleep_forever)
        raise SystemExit("from a nursery")


def _thread_exit() -> None:
    sys.exit("thread says bye")


def _thread_interrupt() -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        (_system_exit, "SystemExit: 3"),
        (_keyboard_interrupt, "KeyboardInterrupt"),
        (_base_group, "SystemExit: from a nursery"),
        (_thread_exit, "SystemExit: thread says bye"),
        (_thread_interrupt, "KeyboardInterrupt"),
    ],
    ids=["sys.exit", "KeyboardInterrupt", "group", "thread sys.exit", "thread KeyboardInterrupt"],
)
async def test_base_exceptions_in_a_task_fail_that_job(
    redis_url: str, queue: str, fn: Any, expected: str
) -> None:
    """sys.exit() / KeyboardInterrupt (alone, or in a BaseExceptionGroup) fail the job only."""
    q, ok = healthy_queue(queue, redis_url)
    task = q.task(name="bad", max_attempts=2, backoff=0)(fn)
    with trio.fail_after(10):
        async with q.open(), serving(echomq.Worker(q)):
            handle = await task.delay()
            error = await dead_error(q, handle.id)
            info = await handle.info()
            await still_serves(ok)
    assert expected in error
    assert info is not None and info.failures == 2  # retried like any failure


async def test_cancel_request_still_cancels_a_task_with_its_own_nursery(
    redis_url: str, queue: str
) -> None:
    """trio's own Cancelled (grouped by the task's nursery) still means cancelled, not failed."""
    q, ok = healthy_queue(queue, redis_url)
    started = trio.Event()

    @q.task(name="nested")
    async def nested() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
            started.set()
            await trio.sleep_forever()

    with trio.fail_after(10):
        async with q.open(), serving(echomq.Worker(q)):
            handle = await nested.delay()
            await started.wait()
            await handle.cancel("stop")
            with pytest.raises(echomq.JobCancelled) as caught:
                await handle.result(timeout=5)
            await still_serves(ok)
    assert caught.value.reason == "stop"


# -- non-transient errors while settling -----------------------------------------------------


def refuse_batches_with(monkeypatch: pytest.MonkeyPatch, result: bytes, error: str) -> None:
    """complete_many (the worker's batches) refuses any batch holding ``result``: the worker
    then settles each job of it alone, through ``jobs.complete`` and its fallback."""
    real = settle.complete_held

    async def complete_many(conn: Any, name: str, ids: Any, tokens: Any, results: Any) -> Any:
        if any(r == result for r in results):
            raise ServerError(error)
        return await real(conn, name, ids, tokens, results)

    monkeypatch.setattr(settle, "complete_held", complete_many)


async def test_a_refused_complete_fails_the_job_dead_with_the_reason(
    redis_url: str, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """complete answering a server error: logged, and the job is failed dead with the reason."""
    q, ok = healthy_queue(queue, redis_url)
    real = jobs.complete

    async def complete(
        conn: Any, name: str, job_id: str, token: int, result: Any, **kw: Any
    ) -> Any:
        if result == b'"refused"':
            raise ServerError("ERR the server refused this result")
        await real(conn, name, job_id, token, result, **kw)

    monkeypatch.setattr(jobs, "complete", complete)
    refuse_batches_with(monkeypatch, b'"refused"', "ERR the server refused this result")

    @q.task(name="echo", max_attempts=3)
    async def echo(value: str) -> str:
        return value

    with trio.fail_after(10):
        async with q.open(), serving(echomq.Worker(q)):
            handle = await echo.delay("refused")
            error = await dead_error(q, handle.id)
            await still_serves(ok)
    assert error == (
        "the result could not be stored: ServerError: ERR the server refused this result"
    )


async def test_a_refused_fail_falls_back_to_dead(
    redis_url: str, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fail (retrying) answering a script error: the job is failed dead instead, reason kept."""
    q, ok = healthy_queue(queue, redis_url)
    real = jobs.fail

    async def fail(*args: Any, dead: bool = False, **kw: Any) -> Any:
        if not dead:
            raise ScriptError("fail: unexpected reply 'maybe'")
        return await real(*args, dead=dead, **kw)

    monkeypatch.setattr(jobs, "fail", fail)

    @q.task(name="flaky", max_attempts=3)
    async def flaky() -> None:
        raise ValueError("first")

    with trio.fail_after(10):
        async with q.open(), serving(echomq.Worker(q)):
            error = await dead_error(q, (await flaky.delay()).id)
            await still_serves(ok)
    assert error == (
        "ValueError: first (not retried: settling failed: "
        "ScriptError: fail: unexpected reply 'maybe')"
    )


async def test_a_refused_log_line_still_fails_the_job(
    redis_url: str, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """add_log answering an error: the traceback is not kept, the failure is still recorded."""
    q, ok = healthy_queue(queue, redis_url)

    async def add_log(*args: Any, **kw: Any) -> int:
        raise InvalidArgument("no logs today")

    monkeypatch.setattr(jobs, "add_log", add_log)

    @q.task(name="flaky", max_attempts=1)
    async def flaky() -> None:
        raise ValueError("boom")

    with trio.fail_after(10):
        async with q.open(), serving(echomq.Worker(q)):
            error = await dead_error(q, (await flaky.delay()).id)
            await still_serves(ok)
    assert error == "ValueError: boom"


async def test_settling_that_cannot_even_fall_back_leaves_the_job_to_recovery(
    redis_url: str, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """complete and fail both refused: logged, the worker lives; recovery counts the stall."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task(name="ok", lease=0.2)  # the claim's lease is the longest task lease
    async def ok(n: int = 0) -> int:
        return n + 1

    real_complete = jobs.complete

    async def complete(
        conn: Any, name: str, job_id: str, token: int, result: Any, **kw: Any
    ) -> Any:
        if result == b'"doomed"':
            raise ServerError("OOM command not allowed")
        await real_complete(conn, name, job_id, token, result, **kw)

    async def fail(*args: Any, **kw: Any) -> Any:
        raise ServerError("OOM command not allowed")

    monkeypatch.setattr(jobs, "complete", complete)
    monkeypatch.setattr(jobs, "fail", fail)
    refuse_batches_with(monkeypatch, b'"doomed"', "OOM command not allowed")

    @q.task(name="echo", lease=0.2)
    async def echo(value: str) -> str:
        return value

    worker = echomq.Worker(q, recovery="stalled", recovery_interval=0.05)
    with trio.fail_after(10):
        async with q.open(), serving(worker):
            handle = await echo.delay("doomed")
            info = await wait_state(q.connection, queue, handle.id, "dead")
            await still_serves(ok)
    assert info.last_error == "stalled" and info.stalled == 1


async def test_the_poison_cases_leave_the_worker_statistics_sane(
    redis_url: str, queue: str
) -> None:
    """After poison jobs the worker counts them as failed and keeps its slots."""
    q, ok = healthy_queue(queue, redis_url)

    @q.task(name="exit")
    async def leave() -> None:
        sys.exit(1)

    worker = echomq.Worker(q, concurrency=2)
    with trio.fail_after(10):
        async with q.open(), serving(worker):
            for _ in range(5):
                await dead_error(q, (await leave.delay()).id)
            await still_serves(ok)
            await until(lambda: worker.statistics().held == 0)
    stats = worker.statistics()
    assert stats.failed == 5 and stats.completed == 1


async def test_a_deeply_nested_event_is_skipped_and_the_worker_lives(
    redis_url: str, queue: str
) -> None:
    """Junk published on the workers' channel and the events channel (nested too deeply)
    is skipped."""
    q, ok = healthy_queue(queue, redis_url)
    with trio.fail_after(10):
        async with q.open(), serving(echomq.Worker(q)):
            junk = b"[" * DEEP + b"]" * DEEP
            publish = "SPUBLISH" if is_sharded(q.connection) else "PUBLISH"  # (a cluster)
            assert await q.connection.execute(publish, f"emq:{{{queue}}}:control", junk) >= 1
            await q.connection.execute(publish, f"emq:{{{queue}}}:events", junk)
            await still_serves(ok)
            await still_serves(ok)
