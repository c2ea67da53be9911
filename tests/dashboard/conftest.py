"""Fixtures for the dashboard tests: a served dashboard on a free loopback port.

The dashboard follows the test's own queue (``queue``) and polls every 0.1 s, so a test
sees a change within a few polls; every wait is bounded with ``trio.fail_after``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
import trio

import echomq
from echomq.dashboard import DashboardInfo, serve_dashboard

TOKEN = "test-token-123"


@pytest.fixture
async def dashboard(
    nursery: trio.Nursery, conn: echomq.Connection, queue: str
) -> AsyncIterator[DashboardInfo]:
    info: DashboardInfo = await nursery.start(
        lambda task_status: serve_dashboard(
            conn, token=TOKEN, queues=[queue], interval=0.1, task_status=task_status
        )
    )
    yield info


def payload(task: str = "demo.work", *args: object, **kwargs: object) -> str:
    return json.dumps({"task": task, "args": list(args), "kwargs": kwargs})
