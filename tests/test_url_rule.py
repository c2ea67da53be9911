"""One URL rule on every surface (``config.resolve_url``; docs/wire.md, "Which URL"): the
explicit argument (``--url``, ``connect(url)``), else the queue's own ``Queue(url=...)``,
else ``$ECHOMQ_URL``, else redis://127.0.0.1:6379/0.

Each surface is tried where it dials: a URL where nothing listens stands for every
source that must lose, the test's server for the one that must win; the call succeeds
only if the rule picked the winner. The worker's command line is in
tests/cli/test_worker_url.py."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from typing import Any

import pytest
import trio

import echomq
import echomq.asyncio
import echomq.sync
from echomq.config import DEFAULT_URL, URL_VARIABLE, resolve_url
from echomq.task import Task

E, Q, F = "redis://env:1/0", "redis://queue:2/0", "redis://flag:3/0"


@pytest.mark.parametrize(
    ("given", "environ", "expect"),
    [
        ((F, Q), {URL_VARIABLE: E}, F),  # the explicit argument wins
        ((None, Q), {URL_VARIABLE: E}, Q),  # then the queue's own
        ((None, None), {URL_VARIABLE: E}, E),  # then the environment
        ((None, None), {}, DEFAULT_URL),  # then the default
        (("", ""), {URL_VARIABLE: ""}, DEFAULT_URL),  # an empty string is not set
        ((), {URL_VARIABLE: E}, E),
    ],
)
def test_the_rule(given: tuple[str | None, ...], environ: dict[str, str], expect: str) -> None:
    assert resolve_url(*given, environ=environ) == expect


def test_a_queue_reads_the_environment_when_it_connects(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Queue(url=...)`` wins over ``$ECHOMQ_URL``; a queue that names none reads the
    variable when it is used, not when the module defining it was imported."""
    monkeypatch.delenv(URL_VARIABLE, raising=False)
    named, unnamed = echomq.Queue("urlq", url=Q), echomq.Queue("urlq")
    monkeypatch.setenv(URL_VARIABLE, E)
    assert (named.url, unnamed.url) == (Q, E)
    unnamed.url = F  # what `echomq worker --url` does
    assert unnamed.url == F
    unnamed.url = None
    assert unnamed.url == E


@pytest.fixture
def env_nowhere(monkeypatch: pytest.MonkeyPatch, closed_port_url: str) -> str:
    """``$ECHOMQ_URL`` names a port where nothing listens."""
    monkeypatch.setenv(URL_VARIABLE, closed_port_url)
    return closed_port_url


def _queue(name: str, url: str | None) -> tuple[echomq.Queue, Task[[int], int]]:
    q = echomq.Queue(name, url=url)

    @q.task(name="double")
    async def double(n: int) -> int:
        return 2 * n

    return q, double


async def _served(q: echomq.Queue, work: object) -> None:
    """Serve ``q`` in this process while ``work`` (a trio function) runs."""
    worker = echomq.Worker(q, concurrency=4, grace=0)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.serve)
        await work()  # type: ignore[operator]
        worker.shutdown()


async def test_producers_of_every_kind_use_the_queues_url_over_the_environment(
    redis_url: str, queue: str, env_nowhere: str
) -> None:
    """Trio, asyncio and blocking producers, and the worker, all dial ``Queue(url=...)``:
    the job enqueued reaches the worker and its result comes back."""
    q, double = _queue(queue, redis_url)

    def blocking() -> int:
        return double.delay_sync(1).result_sync(timeout=10)

    async def on_asyncio() -> int:
        try:
            return await (await double.adelay(2)).aresult(timeout=10)
        finally:
            await q.aclose()

    async def work() -> None:
        async with q.open():
            assert await (await double.delay(3)).result(timeout=10) == 6
        assert await trio.to_thread.run_sync(blocking) == 2
        assert await trio.to_thread.run_sync(asyncio.run, on_asyncio()) == 4

    with trio.fail_after(30):
        await _served(q, work)
    q.close_sync()


async def test_a_queue_that_names_no_url_uses_the_environment(
    redis_url: str, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(URL_VARIABLE, redis_url)
    q, double = _queue(queue, None)

    async def work() -> None:
        async with q.open():
            assert await (await double.delay(5)).result(timeout=10) == 10
        assert await trio.to_thread.run_sync(lambda: double.delay_sync(6).result_sync(10)) == 12

    with trio.fail_after(30):
        await _served(q, work)
    q.close_sync()


async def test_connect_without_a_url_reads_the_environment_on_every_driver(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``echomq.connect()``, ``echomq.asyncio.connect()``, ``echomq.sync.connect()``."""
    monkeypatch.setenv(URL_VARIABLE, redis_url)

    async def on_asyncio() -> object:
        async with echomq.asyncio.connect() as conn:
            return await conn.execute("ECHO", "here")

    def blocking() -> object:
        with echomq.sync.connect() as mq:
            return mq.run(_ping)

    with trio.fail_after(20):
        async with echomq.connect() as conn:
            assert await conn.execute("ECHO", "here") == b"here"
        assert await trio.to_thread.run_sync(asyncio.run, on_asyncio()) == b"here"
        assert await trio.to_thread.run_sync(blocking) == b"here"


async def _ping(conn: Any) -> object:
    return await conn.execute("ECHO", "here")


async def test_connect_with_a_url_wins_over_the_environment(
    redis_url: str, env_nowhere: str
) -> None:
    async def on_asyncio() -> object:
        async with echomq.asyncio.connect(redis_url) as conn:
            return await conn.execute("ECHO", "here")

    def blocking() -> object:
        with echomq.sync.connect(redis_url) as mq:
            return mq.run(_ping)

    with trio.fail_after(20):
        async with echomq.connect(redis_url) as conn:
            assert await conn.execute("ECHO", "here") == b"here"
        assert await trio.to_thread.run_sync(asyncio.run, on_asyncio()) == b"here"
        assert await trio.to_thread.run_sync(blocking) == b"here"


def _echomq(*args: str, env_url: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != URL_VARIABLE}
    if env_url is not None:
        env[URL_VARIABLE] = env_url
    return subprocess.run(
        [sys.executable, "-m", "echomq", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "where", ["--url after the command", "--url before the command", "$ECHOMQ_URL"]
)
def test_the_cli_commands_follow_the_rule(
    redis_url: str, queue: str, closed_port_url: str, where: str
) -> None:
    """``echomq status <queue>``: the flag (either place) wins over the environment; the
    environment is used when no flag is given (the queue exists: status of an unknown
    queue is exit 1)."""
    made = _echomq(
        "enqueue", "-q", queue, "add", "[1]", "--create", "--url", redis_url, env_url=None
    )
    assert made.returncode == 0, made.stderr
    if where == "--url after the command":
        done = _echomq("status", queue, "--url", redis_url, env_url=closed_port_url)
    elif where == "--url before the command":
        done = _echomq("--url", redis_url, "status", queue, env_url=closed_port_url)
    else:
        done = _echomq("status", queue, env_url=redis_url)
    assert done.returncode == 0, done.stderr
    assert queue in done.stdout


def test_the_cli_names_the_server_it_could_not_reach(closed_port_url: str, queue: str) -> None:
    """The losing source is not tried: with only ``$ECHOMQ_URL`` set, a refusal names it."""
    done = _echomq("status", queue, env_url=closed_port_url)
    assert done.returncode == 1
    assert closed_port_url.split("?")[0].removeprefix("redis://").split("/")[0] in done.stderr
