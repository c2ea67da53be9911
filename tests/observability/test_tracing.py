"""OpenTelemetry: a span on enqueue, its context in the row's ``trace`` field, a child span
around the run; read back through the SDK's in-memory exporter. And no trace of it all
when ``opentelemetry`` is not installed."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
import trio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import echomq

_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The SDK wired once per process (a global provider can be set only once)."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def make_queue(name: str, url: str) -> echomq.Queue:
    q = echomq.Queue(name, url=url)

    @q.task(name="add")
    async def add(a: int, b: int) -> int:
        with trace.get_tracer("user").start_as_current_span("inside the task"):
            return a + b

    @q.task(name="boom")
    async def boom() -> None:
        raise ValueError("no luck")

    return q


async def test_a_trace_follows_a_request_into_its_job(
    redis_url: str, queue: str, spans: InMemorySpanExporter
) -> None:
    """request -> send <queue> (PRODUCER) -> process <queue> (CONSUMER) -> the task's own
    span: one trace; the row carries the context; a failure marks the run's span."""
    q = make_queue(queue, redis_url)
    tracer = trace.get_tracer("test")
    worker = echomq.Worker(q, concurrency=2, grace=0)
    with trio.fail_after(20):
        async with q.open(), trio.open_nursery() as nursery:
            with tracer.start_as_current_span("request"):
                handle = await q.tasks["add"].delay(1, 2)
                failing = await q.tasks["boom"].delay()
            row = await echomq.jobs.get_job(q.connection, queue, handle.id)
            # read while the job waits: a finished row drops its headers (docs/results.md)
            raw = await q.connection.execute("HGET", f"emq:{{{queue}}}:job:{handle.id}", "headers")
            await nursery.start(worker.serve)
            assert await handle.result(timeout=10) == 3
            with pytest.raises(echomq.JobFailed):
                await failing.result(timeout=10)
            nursery.cancel_scope.cancel()
    assert row is not None
    assert "traceparent" in json.loads(raw)
    by_name: dict[str, list] = {}
    for span in spans.get_finished_spans():
        by_name.setdefault(span.name, []).append(span)
    (request,) = by_name["request"]
    sends = by_name[f"send {queue}"]
    runs = by_name[f"process {queue}"]
    (inner,) = by_name["inside the task"]
    send = next(s for s in sends if s.attributes["messaging.message.id"] == handle.id)
    run = next(s for s in runs if s.attributes["messaging.message.id"] == handle.id)
    assert send.kind is SpanKind.PRODUCER and run.kind is SpanKind.CONSUMER
    trace_id = request.context.trace_id
    assert {send.context.trace_id, run.context.trace_id, inner.context.trace_id} == {trace_id}
    assert send.parent.span_id == request.context.span_id
    assert run.parent.span_id == send.context.span_id
    assert inner.parent.span_id == run.context.span_id
    assert run.attributes["echomq.task"] == "add"
    assert run.attributes["echomq.outcome"] == "completed"
    assert send.attributes["messaging.destination.name"] == queue
    failed = next(s for s in runs if s.attributes["messaging.message.id"] == failing.id)
    assert failed.status.status_code is StatusCode.ERROR
    assert "ValueError: no luck" in (failed.status.description or "")


async def test_sync_and_asyncio_enqueues_are_traced(
    redis_url: str, queue: str, spans: InMemorySpanExporter
) -> None:
    """delay_sync and adelay open the same send span and write the context."""
    import asyncio

    q = make_queue(queue, redis_url)

    def blocking() -> str:
        with trace.get_tracer("test").start_as_current_span("sync request"):
            return q.tasks["add"].delay_sync(1, 1).id

    async def in_asyncio() -> str:
        with trace.get_tracer("test").start_as_current_span("asyncio request"):
            handle = await q.tasks["add"].adelay(2, 2)
        await q.aclose()
        return handle.id

    with trio.fail_after(20):
        sync_id = await trio.to_thread.run_sync(blocking)
        aio_id = await trio.to_thread.run_sync(asyncio.run, in_asyncio())
    q.close_sync()
    sends = {s.attributes["messaging.message.id"]: s for s in spans.get_finished_spans()
             if s.name == f"send {queue}"}  # fmt: skip
    parents = {s.name: s for s in spans.get_finished_spans() if s.name.endswith("request")}
    assert sends[sync_id].parent.span_id == parents["sync request"].context.span_id
    assert sends[aio_id].parent.span_id == parents["asyncio request"].context.span_id


def test_no_opentelemetry_no_tracing(redis_url: str, queue: str) -> None:
    """Without opentelemetry importable, tracing is off, the row has no trace field, and a
    worker runs the job."""
    code = f"""
import sys
sys.modules["opentelemetry"] = None  # as if it were not installed
import echomq, echomq._tracing as t
assert not t.ENABLED
q = echomq.Queue({queue!r}, url={redis_url!r})
@q.task(name="add")
async def add(a, b): return a + b
handle = add.delay_sync(1, 2)
import echomq.sync
with echomq.sync.connect({redis_url!r}) as mq:
    fields = mq.client.hkeys(f"emq:{{{{{queue}}}}}:job:{{handle.id}}")
assert b"headers" not in fields and b"payload" in fields, fields
import trio
async def run_it():
    async with trio.open_nursery() as nursery:
        await nursery.start(echomq.Worker(q, concurrency=2, grace=0).serve)
        async with q.open():
            with trio.fail_after(20):
                assert await q.handle(handle.id).result() == 3
        nursery.cancel_scope.cancel()
trio.run(run_it)
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


async def test_a_failed_runs_span_says_whether_the_job_is_retried_or_dead(
    redis_url: str, queue: str, spans: InMemorySpanExporter
) -> None:
    """Attempt 1 of 2 fails and is retried; attempt 2 fails and the job is dead: the run
    spans say so, as the worker's counters do (``echomq_jobs_total``'s outcomes)."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task(name="twice", max_attempts=2, backoff=0)
    async def twice() -> None:
        raise ValueError("no luck")

    worker = echomq.Worker(q, concurrency=2, grace=0)
    with trio.fail_after(20):
        async with q.open(), trio.open_nursery() as nursery:
            await nursery.start(worker.serve)
            handle = await twice.delay()
            with pytest.raises(echomq.JobFailed):
                await handle.result(timeout=10)
            nursery.cancel_scope.cancel()
    runs = sorted(
        (s for s in spans.get_finished_spans() if s.name == f"process {queue}"),
        key=lambda s: s.attributes["echomq.attempt"],
    )
    assert [(s.attributes["echomq.attempt"], s.attributes["echomq.outcome"]) for s in runs] == [
        (1, "retried"),
        (2, "dead"),
    ]
