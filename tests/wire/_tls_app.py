"""A queue for the TLS configuration tests' worker processes (its name from the environment)."""

from __future__ import annotations

import os

import echomq

queue = echomq.Queue(os.environ["EMQ_TEST_QUEUE"])


@queue.task(name="noop")
async def noop() -> None: ...
