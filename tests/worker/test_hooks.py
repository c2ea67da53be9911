"""Hooks (``_worker/hooks.py``, ``_client/enqueue_hooks.py``): each fires with its job and
the outcome Redis settled; a hook that raises or hangs is logged and counted, and neither
the worker nor the job's outcome notices, except ``around_run``, whose failure is the
job's."""

from __future__ import annotations

import contextvars
import time
from typing import Any

import pytest
import trio
import trio.lowlevel

import echomq
from echomq import Enqueueing, Job, JobOutcome
from echomq._worker.metrics import render, worker_registry

from ._runtime import serving, until

Seen = list[tuple[str, str, str, JobOutcome]]


# the trace context is one entry of the headers while tracing is on (an earlier test in
# the session may have installed a tracer provider): the hooks' own entries are the rest
_TRACE_KEYS = frozenset({"traceparent", "tracestate", "baggage"})


def _own(headers: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k not in _TRACE_KEYS}


def recorder(q: echomq.Queue, seen: Seen, *, plain: bool) -> None:
    """Register the four outcome hooks on ``q``: each notes (hook, job id, task, outcome)."""
    for name in ("on_complete", "on_retry", "on_dead", "on_cancel"):
        if plain:

            def hook(job: Job, outcome: JobOutcome, name: str = name) -> None:
                seen.append((name, job.id, job.task, outcome))

        else:

            async def hook(job: Job, outcome: JobOutcome, name: str = name) -> None:
                await trio.lowlevel.checkpoint()
                seen.append((name, job.id, job.task, outcome))

        getattr(q.hooks, name)(hook)


@pytest.mark.parametrize("plain", [True, False], ids=["plain", "async"])
async def test_each_outcome_hook_fires_with_its_job_and_outcome(
    redis_url: str, queue: str, plain: bool
) -> None:
    q = echomq.Queue(queue, url=redis_url)
    seen: Seen = []
    recorder(q, seen, plain=plain)

    @q.task
    async def ok(x: int) -> int:
        return x * 2

    @q.task(max_attempts=2, backoff=0.01)
    async def flaky() -> None:
        raise ValueError("no luck")

    @q.task
    async def stop() -> None:
        raise echomq.JobCancelled("changed my mind")

    worker = echomq.Worker(q, concurrency=4, grace=0)
    with trio.fail_after(20):
        async with q.open(), serving(worker):
            done = await ok.delay(21)
            bad = await flaky.delay()
            off = await stop.delay()
            assert await done.result(timeout=10) == 42
            with pytest.raises(echomq.JobFailed):
                await bad.result(timeout=10)
            await until(lambda: len(seen) == 4)
    by_hook = {(name, job_id): (task, o) for name, job_id, task, o in seen}
    task, o = by_hook["on_complete", done.id]
    assert task.endswith("ok") and o.outcome == "completed" and o.exception is None
    task, o = by_hook["on_retry", bad.id]
    assert o.outcome == "retried" and o.error is not None and "ValueError: no luck" in o.error
    assert isinstance(o.exception, ValueError) and o.retry_in is not None and o.retry_in >= 0
    task, o = by_hook["on_dead", bad.id]
    assert task.endswith("flaky") and o.outcome == "dead" and "no luck" in (o.error or "")
    task, o = by_hook["on_cancel", off.id]
    assert o.outcome == "cancelled" and o.reason == "changed my mind"
    assert q.hooks.errors.counts == {}


async def test_before_enqueue_headers_reach_the_workers_job(redis_url: str, queue: str) -> None:
    """A plain and an async ``before_enqueue`` add headers; the task reads them on its
    ``Job``, and the outcome hooks see them too. The hook sees the task and its options."""
    q = echomq.Queue(queue, url=redis_url)
    saw: list[Enqueueing] = []
    finished: list[dict[str, str]] = []

    @q.hooks.before_enqueue
    def tenant(e: Enqueueing) -> None:
        saw.append(e)
        e.headers["tenant"] = "acme"

    @q.hooks.before_enqueue
    async def request(e: Enqueueing) -> None:
        await trio.lowlevel.checkpoint()
        e.headers["request"] = f"r-{e.new_job.priority}"

    @q.hooks.on_complete
    def done(job: Job, outcome: JobOutcome) -> None:
        finished.append(dict(job.headers))

    @q.task
    async def who(job: Job) -> list[str]:
        return [job.headers["tenant"], job.headers["request"]]

    worker = echomq.Worker(q, concurrency=2, grace=0)
    with trio.fail_after(20):
        async with q.open(), serving(worker):
            handle = await who.apply(priority=3)
            assert await handle.result(timeout=10) == ["acme", "r-3"]
            many = await who.starmap([(), ()])
            for h in many:
                assert await h.result(timeout=10) == ["acme", "r-0"]
            await until(lambda: len(finished) == 3)
    assert _own(finished[0]) == {"tenant": "acme", "request": "r-3"}
    assert saw[0].queue == queue and saw[0].task is not None and saw[0].task.endswith("who")


async def test_around_run_wraps_the_run_in_order_with_a_context(redis_url: str, queue: str) -> None:
    """Two middlewares, the first outermost; one opens a context (a contextvar) that the
    task sees; a plain one answers ``call_next()``; the result passes through them."""
    q = echomq.Queue(queue, url=redis_url)
    tenant: contextvars.ContextVar[str] = contextvars.ContextVar("tenant", default="none")
    order: list[str] = []

    @q.hooks.around_run
    async def outer(job: Job, call_next: Any) -> Any:
        order.append("outer in")
        token = tenant.set(job.id)
        try:
            return [await call_next(), "outer"]
        finally:
            tenant.reset(token)
            order.append("outer out")

    @q.hooks.around_run
    def inner(job: Job, call_next: Any) -> Any:
        order.append("inner")
        return call_next()

    @q.task
    def sync_task() -> str:  # a thread task: the context reaches it too
        return tenant.get()

    worker = echomq.Worker(q, concurrency=2, grace=0)
    with trio.fail_after(20):
        async with q.open(), serving(worker):
            handle = await sync_task.delay()
            assert await handle.result(timeout=10) == [handle.id, "outer"]
    assert order == ["outer in", "inner", "outer out"]


async def test_around_run_raising_is_the_jobs_failure(redis_url: str, queue: str) -> None:
    """What ``around_run`` raises fails the job with its reason (retried, then dead by the
    task's backoff); a plain one answering no awaitable fails it too; one that hangs is
    stopped by the task's timeout. The worker goes on serving."""
    q = echomq.Queue(queue, url=redis_url)
    runs: list[str] = []

    @q.hooks.around_run
    async def gate(job: Job, call_next: Any) -> Any:
        if job.task.endswith("refused"):
            raise PermissionError(f"tenant of {job.id} is suspended")
        if job.task.endswith("hangs"):
            await trio.sleep_forever()
        return await call_next()

    @q.hooks.around_run
    def plain(job: Job, call_next: Any) -> Any:
        return "a plain value" if job.task.endswith("wrong") else call_next()

    @q.task(max_attempts=2, backoff=0.01)
    async def refused() -> None:
        runs.append("refused")

    @q.task(timeout=0.3)
    async def hangs() -> None:
        runs.append("hangs")

    @q.task
    async def wrong() -> None:
        runs.append("wrong")

    @q.task
    async def fine() -> str:
        return "ok"

    worker = echomq.Worker(q, concurrency=4, grace=0)
    with trio.fail_after(20):
        async with q.open(), serving(worker):
            a, b, c = await refused.delay(), await hangs.delay(), await wrong.delay()
            for handle in (a, b, c):
                with pytest.raises(echomq.JobFailed):
                    await handle.result(timeout=10)
            assert await (await fine.delay()).result(timeout=10) == "ok"
            info_a, info_b, info_c = await a.info(), await b.info(), await c.info()
    assert runs == []
    assert info_a is not None and info_a.state == "dead" and info_a.failures == 2
    assert f"PermissionError: tenant of {a.id} is suspended" in (info_a.last_error or "")
    assert info_b is not None and "TimeoutError: ran longer than 0.3 s" in (info_b.last_error or "")
    assert info_c is not None and "not an awaitable" in (info_c.last_error or "")
    assert q.hooks.errors.counts == {}  # the job's failures, not the hooks'


async def test_failing_and_slow_hooks_change_nothing(redis_url: str, queue: str) -> None:
    """A ``before_enqueue`` that raises, or leaves a header that is not a str, is undone
    (the job goes, without its headers); outcome hooks that raise (``SystemExit``
    included) or hang past the hooks' timeout, and a plain one that blocks a while, leave
    every outcome as settled and the worker serving; each failure is counted, and the
    worker's /metrics says so."""
    q = echomq.Queue(queue, url=redis_url)
    q.hooks = echomq.Hooks(timeout=0.2)  # (the producer's too)
    settled: list[str] = []

    @q.hooks.before_enqueue
    def raises(e: Enqueueing) -> None:
        e.headers["half"] = "written"
        raise RuntimeError("the tenant service is down")

    @q.hooks.before_enqueue
    def not_a_str(e: Enqueueing) -> None:
        e.headers["n"] = 1  # type: ignore[assignment]

    @q.hooks.before_enqueue
    def good(e: Enqueueing) -> None:
        e.headers["kept"] = "yes"

    @q.hooks.on_complete
    def exits(job: Job, outcome: JobOutcome) -> None:
        raise SystemExit(3)

    @q.hooks.on_complete
    async def hangs(job: Job, outcome: JobOutcome) -> None:
        await trio.sleep_forever()

    @q.hooks.on_complete
    def blocks(job: Job, outcome: JobOutcome) -> None:
        time.sleep(0.05)
        settled.append(job.id)

    @q.hooks.on_dead
    async def raises_later(job: Job, outcome: JobOutcome) -> None:
        await trio.lowlevel.checkpoint()
        raise ValueError("the reporter is broken")

    @q.task
    async def headers(job: Job) -> dict[str, str]:
        return dict(job.headers)

    @q.task
    async def boom() -> None:
        raise KeyError("x")

    worker = echomq.Worker(q, concurrency=4, grace=0)
    with trio.fail_after(20):
        async with q.open(), serving(worker):
            first = await headers.delay()
            assert _own(await first.result(timeout=10)) == {"kept": "yes"}
            dead = await boom.delay()
            with pytest.raises(echomq.JobFailed):
                await dead.result(timeout=10)
            handles = [await headers.delay() for _ in range(3)]
            for h in handles:
                assert _own(await h.result(timeout=10)) == {"kept": "yes"}
            counts = q.hooks.errors.counts
            await until(lambda: counts.get("on_complete") == 8 and counts.get("on_dead") == 1)
            assert worker.statistics().completed == 4 and worker.statistics().failed == 1
            registry, _ = worker_registry(worker)
            text = render(registry)[0].decode()
    assert counts["before_enqueue"] == 2 * 5  # two failing hooks, five enqueues
    assert sorted(settled) == sorted([first.id, *(h.id for h in handles)])
    line = f'echomq_hook_errors_total{{hook="on_complete",queue="{queue}"}} 8.0'
    assert line in text
