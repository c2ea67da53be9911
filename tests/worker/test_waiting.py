"""A worker and a Redis that is not there (yet, or for a while): it waits, never dies.

Each test runs a worker process (``python -m echomq._worker.main``) against a redis-server
of its own, started late, restarted, or configured to refuse the worker's credentials.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import trio

import echomq
from echomq.testing import RedisServer, free_port

from ._runtime import until, worker_process


async def _contains(path: Path, text: str) -> bool:
    return text in await trio.Path(path).read_text()


async def test_worker_started_before_redis_waits_then_serves(queue: str, tmp_path: Path) -> None:
    """No Redis yet: the worker logs one line per attempt and waits; once a redis-server
    comes up on that port, it serves (before: exit 1 in 0.3 s with a 70-line group)."""
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    log = tmp_path / "w.log"
    server = RedisServer(port=port)
    with trio.fail_after(40):
        async with worker_process(url, queue, log) as proc:
            await until(lambda: _contains(log, "(attempt 2)"), 15)
            assert proc.returncode is None
            await trio.to_thread.run_sync(server.start)
            try:
                q = echomq.Queue(queue, url=url)
                sleepy = q.task(name="sleepy")(_sleepy)
                async with q.open():
                    handle = await sleepy.delay(0)
                    assert await handle.result(timeout=20) == "slept"
                proc.send_signal(signal.SIGTERM)
                assert await proc.wait() == 0
            finally:
                await trio.to_thread.run_sync(server.stop)
    text = log.read_text()
    assert f"waiting for redis at {url} (attempt 1): connection refused" in text
    assert "Traceback" not in text


async def _sleepy(seconds: float) -> str:
    return "run by the worker process"


async def test_sigterm_while_waiting_for_redis_exits_cleanly(queue: str, tmp_path: Path) -> None:
    """Stopped while it waits: exit 0 at once, no traceback."""
    url = f"redis://127.0.0.1:{free_port()}/0"
    log = tmp_path / "w.log"
    with trio.fail_after(30):
        async with worker_process(url, queue, log) as proc:
            await until(lambda: _contains(log, "waiting for redis at"), 15)
            proc.send_signal(signal.SIGTERM)
            with trio.fail_after(5):
                assert await proc.wait() == 0
    text = log.read_text()
    assert "stopped while waiting for redis" in text
    assert "Traceback" not in text


@pytest.mark.parametrize(
    ("server_options", "url_of", "expected"),
    [
        ({"password": "s3cr3t"}, lambda s: f"redis://:wrong@127.0.0.1:{s.port}/0", "WRONGPASS"),
        ({"password": "s3cr3t"}, lambda s: f"redis://127.0.0.1:{s.port}/0", "NOAUTH"),
        ({"tls": True}, lambda s: f"rediss://127.0.0.1:{s.port}/0", "TLS certificate check"),
    ],
    ids=["wrong-password", "missing-password", "untrusted-certificate"],
)
async def test_credentials_refused_stop_the_worker_with_one_clear_line(
    queue: str, tmp_path: Path, server_options: dict[str, object], url_of: object, expected: str
) -> None:
    """A refusal that waiting cannot fix (credentials, TLS) is not waited for: exit 1 with
    one line naming the cause, no traceback, no retry loop."""
    log = tmp_path / "w.log"
    with RedisServer(**server_options) as server:  # type: ignore[arg-type]
        url = url_of(server)  # type: ignore[operator]
        with trio.fail_after(20):
            async with worker_process(url, queue, log) as proc:
                assert await proc.wait() == 1
    text = log.read_text()
    assert "cannot serve" in text and expected in text
    assert "waiting for redis" not in text
    assert "Traceback" not in text


async def test_redis_gone_for_a_while_does_not_end_the_worker(queue: str, tmp_path: Path) -> None:
    """Redis killed under a serving worker, then back (same port): the worker lives on
    and runs the next job."""
    log = tmp_path / "w.log"
    with RedisServer() as server:
        q = echomq.Queue(queue, url=server.url)
        sleepy = q.task(name="sleepy")(_sleepy)
        with trio.fail_after(40):
            async with worker_process(server.url, queue, log) as proc:
                async with q.open():
                    first = await sleepy.delay(0)
                    assert await first.result(timeout=20) == "slept"
                await trio.to_thread.run_sync(server.kill)
                await until(lambda: _contains(log, "WARNING"), 15)  # it noticed
                await trio.to_thread.run_sync(server.restart)
                async with q.open():
                    second = await sleepy.delay(0)
                    assert await second.result(timeout=20) == "slept"
                assert proc.returncode is None
                proc.send_signal(signal.SIGTERM)
                assert await proc.wait() == 0
