"""A worker and a Redis that is not there (yet, or for a while): it waits, never dies.

Each test runs a worker process (the fault kit's ``open_worker_process``) against a
redis-server of its own, started late or configured to refuse the worker's credentials
(Redis gone under a serving worker: tests/chaos/test_redis_faults.py).
"""

from __future__ import annotations

import pytest
import trio

import echomq
from echomq.testing import RedisServer, free_port

from ._runtime import worker_process


async def test_worker_started_before_redis_waits_then_serves(queue: str) -> None:
    """No Redis yet: the worker logs one line per attempt and waits; once a redis-server
    comes up on that port, it serves (before: exit 1 in 0.3 s with a 70-line group)."""
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    server = RedisServer(port=port)
    with trio.fail_after(40):
        async with worker_process(url, queue, wait_serving=False) as proc:
            await proc.wait_for_log("(attempt 2)")
            assert proc.returncode is None
            await trio.to_thread.run_sync(server.start)
            try:
                await proc.wait_serving()
                q = echomq.Queue(queue, url=url)
                sleepy = q.task(name="sleepy")(_sleepy)
                async with q.open():
                    handle = await sleepy.delay(0)
                    assert await handle.result(timeout=20) == "slept"
                assert await proc.stop() == 0
            finally:
                await trio.to_thread.run_sync(server.stop)
    text = proc.output
    assert f"waiting for redis at {url} (attempt 1): connection refused" in text
    assert "Traceback" not in text


async def _sleepy(seconds: float) -> str:
    return "run by the worker process"


async def test_sigterm_while_waiting_for_redis_exits_cleanly(queue: str) -> None:
    """Stopped while it waits: exit 0 at once, no traceback."""
    url = f"redis://127.0.0.1:{free_port()}/0"
    with trio.fail_after(30):
        async with worker_process(url, queue, wait_serving=False) as proc:
            await proc.wait_for_log("waiting for redis at")
            with trio.fail_after(5):
                assert await proc.stop() == 0
    text = proc.output
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
    queue: str, server_options: dict[str, object], url_of: object, expected: str
) -> None:
    """A refusal that waiting cannot fix (credentials, TLS) is not waited for: exit 1 with
    one line naming the cause, no traceback, no retry loop."""
    with RedisServer(**server_options) as server:  # type: ignore[arg-type]
        url = url_of(server)  # type: ignore[operator]
        with trio.fail_after(20):
            async with worker_process(url, queue, wait_serving=False) as proc:
                assert await proc.wait() == 1
    text = proc.output
    assert "cannot serve" in text and expected in text
    assert "waiting for redis" not in text
    assert "Traceback" not in text
