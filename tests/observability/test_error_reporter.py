"""The error reporter of docs/examples/error_reporter, on a real queue and worker: its
transport is a list in this process (what a reporting service would receive)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.lowlevel

import echomq

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "error_reporter"
sys.path.insert(0, str(EXAMPLE))
from reporter import ErrorReporter  # noqa: E402

from _waits import until  # noqa: E402


class ListTransport:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def send(self, event: dict[str, Any]) -> None:
        self.events.append(event)


class BrokenTransport:
    async def send(self, event: dict[str, Any]) -> None:
        await trio.lowlevel.checkpoint()
        raise ConnectionError("the reporting service is down")


async def test_a_dead_job_is_one_event_with_its_tags_and_stack(redis_url: str, queue: str) -> None:
    q = echomq.Queue(queue, url=redis_url)
    transport = ListTransport()
    reporter = ErrorReporter(transport, release="shop@1.2")
    q.hooks.add(reporter)

    @q.task(max_attempts=2, backoff=0.01)
    async def charge(order: int) -> None:
        await reporter.capture_message(f"charging {order}")
        raise ValueError(f"card declined for order {order}")

    @q.task
    async def fine() -> str:
        return "ok"

    worker = echomq.Worker(q, concurrency=2, grace=0)
    with trio.fail_after(20):
        async with q.open(), trio.open_nursery() as nursery:
            await nursery.start(worker.serve)
            reporter.tag("user", "u-7")  # as a web request would, before it enqueues
            handle = await charge.delay(42)
            ok = await fine.delay()
            with pytest.raises(echomq.JobFailed):
                await handle.result(timeout=10)
            assert await ok.result(timeout=10) == "ok"
            await until(lambda: len(transport.events) == 3)
            worker.shutdown()
    messages = [e for e in transport.events if "exception" not in e]
    (event,) = [e for e in transport.events if "exception" in e]
    assert [m["message"] for m in messages] == ["charging 42", "charging 42"]
    assert messages[1]["tags"]["echomq.attempt"] == "2" and messages[1]["tags"]["user"] == "u-7"
    assert event["level"] == "error" and event["release"] == "shop@1.2"
    assert event["exception"]["type"] == "ValueError"
    assert event["exception"]["value"] == "card declined for order 42"
    assert any(f["function"] == "charge" for f in event["exception"]["frames"])
    assert event["tags"]["user"] == "u-7" and event["tags"]["echomq.job"] == handle.id
    assert event["fingerprint"] == [charge.name, "ValueError"]
    assert len(event["breadcrumbs"]) == 1  # the retry before it
    assert q.hooks.errors.counts == {}


async def test_a_broken_transport_leaves_the_outcome_and_the_worker(
    redis_url: str, queue: str
) -> None:
    q = echomq.Queue(queue, url=redis_url)
    q.hooks.add(ErrorReporter(BrokenTransport()))

    @q.task
    async def boom() -> None:
        raise RuntimeError("x")

    @q.task
    async def fine() -> str:
        return "ok"

    worker = echomq.Worker(q, concurrency=2, grace=0)
    with trio.fail_after(20):
        async with q.open(), trio.open_nursery() as nursery:
            await nursery.start(worker.serve)
            dead = await boom.delay()
            with pytest.raises(echomq.JobFailed):
                await dead.result(timeout=10)
            await until(lambda: q.hooks.errors.counts.get("on_dead") == 1)
            assert await (await fine.delay()).result(timeout=10) == "ok"
            info = await dead.info()
            worker.shutdown()
    assert (
        info is not None and info.state == "dead" and "RuntimeError: x" in (info.last_error or "")
    )
