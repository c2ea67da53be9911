"""Shared fixtures.

Rules that keep the suite deterministic and fast:
- Every test talks to a real redis-server this session started itself (``echomq.testing``),
  never a system-wide one, never a mock. One server per test session; each test gets a
  queue name of its own (``queue``), so no test sees another's keys and nothing is flushed.
- Leases in tests are tens to hundreds of milliseconds; every wait is bounded with
  ``trio.fail_after``. Speed is measured in ``benchmarks/``, never asserted here.
- A test that needs to kill or restart Redis starts a server of its own (``RedisServer``).
- The verb, worker, cancel and caller tests (``tests/verbs``, ``tests/worker``,
  ``tests/cancellation``, ``tests/callers``) run twice: ``[single]`` against one server
  and ``[cluster]`` against a private 3-master Redis Cluster (``redis_url`` is
  parametrized there). A test that only makes sense on one server is marked
  ``@pytest.mark.single_node("why")``. A test elsewhere marked
  ``@pytest.mark.both_backends`` runs twice the same way (the CLI's queue commands, whose
  subprocesses are too slow to run all of them twice).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

import echomq
from echomq.testing import RedisCluster, RedisServer

BACKENDS = ("single", "cluster")
# redis_url parametrized there
BOTH_BACKENDS = ("verbs", "worker", "cancellation", "results", "callers", "flows")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "single_node(reason): run only against one server, not the cluster"
    )
    config.addinivalue_line(
        "markers", "both_backends: run against one server and the cluster (redis_url)"
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "redis_url" not in metafunc.fixturenames:
        return
    if metafunc.definition.get_closest_marker("single_node") is not None:
        return
    parts = metafunc.definition.path.relative_to(Path(__file__).parent).parts
    marked = metafunc.definition.get_closest_marker("both_backends") is not None
    if marked or (parts and parts[0] in BOTH_BACKENDS):
        metafunc.parametrize("redis_url", BACKENDS, indirect=True)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    """A private 3-master Redis Cluster for the session (started on first use, ~2 s)."""
    with RedisCluster() as cluster:
        yield cluster


@pytest.fixture
def redis_url(request: pytest.FixtureRequest) -> str:
    """The server's URL; ``[cluster]``-parametrized tests get the cluster's."""
    if getattr(request, "param", "single") == "cluster":
        cluster: RedisCluster = request.getfixturevalue("redis_cluster")
        return cluster.url
    server: RedisServer = request.getfixturevalue("redis_server")
    return server.url


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
