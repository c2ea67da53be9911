"""Shared fixtures.

Rules that keep the suite deterministic and fast:
- Every test talks to a real redis-server this session started itself (``echomq.testing``),
  never a system-wide one, never a mock. One server per test session; each test gets a
  queue name of its own (``queue``), so no test sees another's keys and nothing is flushed.
- Leases in tests are tens to hundreds of milliseconds; every wait is bounded with
  ``trio.fail_after``. Speed is measured in ``benchmarks/``, never asserted here.
- A test that needs to kill or restart Redis starts a server of its own (``RedisServer``).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

import echomq
from echomq.testing import RedisServer


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    return redis_server.url


@pytest.fixture
def queue() -> str:
    """A queue name no other test uses."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def conn(redis_url: str) -> AsyncIterator[echomq.Connection]:
    async with echomq.connect(redis_url) as c:
        yield c


@pytest.fixture
def closed_port_url() -> str:
    """A URL where nothing listens: a verb that reached the wire would fail to connect."""
    from echomq.testing import free_port

    return f"redis://127.0.0.1:{free_port()}/0?connect_timeout=0.2"
