"""Fixtures for the wire tests: servers of their own for tests that kill, stop or configure them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from echomq.testing import RedisServer


@pytest.fixture
def own_server() -> Iterator[RedisServer]:
    """A private redis-server this test may crash, drop, freeze and restart (the fault kit)."""
    with RedisServer() as server:
        yield server


@pytest.fixture(scope="module")
def password_server() -> Iterator[RedisServer]:
    """A redis-server with ``requirepass`` set (the default user needs a password)."""
    with RedisServer(password="s3cr3t") as server:
        yield server


@pytest.fixture(scope="module")
def tls_server() -> Iterator[RedisServer]:
    """A redis-server serving TLS only, with a self-signed CA made by ``echomq.testing``."""
    with RedisServer(tls=True) as server:
        yield server
