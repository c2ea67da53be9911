"""A helper refused by the server (an ACL permission, a credential, a TLS setting) is not a
crash: one ERROR line, no traceback, a long pause between tries (``_worker/supervise.py``,
rule 3); the worker serves on."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio

import echomq
from echomq import repeat
from echomq._wire.server_errors import server_error
from echomq._worker import supervise

from ._runtime import serving, until


async def test_a_refused_helper_is_said_once_and_tried_again_later(
    redis_url: str, queue: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: each refusal was a crash, its traceback logged, restarted within 5 s."""
    q = echomq.Queue(queue, url=redis_url)
    tries = 0

    async def refused_tick(*args: Any, **kwargs: Any) -> repeat.Tick:
        nonlocal tries
        tries += 1
        raise server_error("NOPERM this user has no permissions to run the 'zrangebyscore' command")

    monkeypatch.setattr(repeat, "tick", refused_tick)
    monkeypatch.setattr(supervise, "REFUSED_RETRY", 0.05)

    @q.task(name="ping", every=60)
    async def ping() -> str:
        return "pong"

    worker = echomq.Worker(q)
    with trio.fail_after(10), caplog.at_level(logging.ERROR, logger="echomq.worker"):
        async with q.open(), serving(worker):
            await until(lambda: tries >= 4)
            assert await (await ping.delay()).result(timeout=5) == "pong"
    lines = [r for r in caplog.records if "refused" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert "'repeat scheduler' refused" in lines[0].getMessage()
    assert "the command ZRANGEBYSCORE" in lines[0].getMessage() and lines[0].exc_info is None
    assert worker._supervisor.refusals >= 3 and worker.statistics().helper_restarts == 0
