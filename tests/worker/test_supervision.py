"""Supervision: a crashing helper loop is logged and restarted; the worker keeps serving."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio

import echomq
from echomq import stalled

from ._runtime import serving, until


async def test_crashing_helper_is_logged_and_restarted(
    redis_url: str, queue: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug in the recovery loop is logged with its traceback; the loop comes back."""
    q = echomq.Queue(queue, url=redis_url)
    real_check = stalled.check
    calls = 0

    async def check_with_a_bug(*args: Any, **kwargs: Any) -> stalled.Sweep:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError("a bug in the sweep")
        return await real_check(*args, **kwargs)

    monkeypatch.setattr(stalled, "check", check_with_a_bug)

    @q.task
    async def ping() -> str:
        return "pong"

    worker = echomq.Worker(q, recovery="stalled", recovery_interval=0.05)
    with trio.fail_after(5), caplog.at_level(logging.ERROR, logger="echomq.worker"):
        async with q.open(), serving(worker):
            await until(lambda: calls >= 4)
            assert await (await ping.delay()).result(timeout=5) == "pong"
    assert worker.statistics().helper_restarts == 1
    crash = [r for r in caplog.records if "crashed" in r.getMessage()]
    assert len(crash) == 1 and crash[0].exc_info is not None
    assert "RuntimeError: a bug in the sweep" in caplog.text  # with its traceback
