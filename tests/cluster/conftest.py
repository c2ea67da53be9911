"""Fixtures for the Redis Cluster tests.

``redis_cluster`` (tests/conftest.py) is the session's shared 3-master cluster: tests that
only route commands use it. Tests that move slots, fail masters over or kill nodes use
``fault_cluster``: 3 masters with a replica each, shared by this package; every test
leaves it stable (all slots served, replicas in sync) for the next.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from echomq.testing import RedisCluster


@pytest.fixture(scope="package")
def fault_cluster() -> Iterator[RedisCluster]:
    with RedisCluster(masters=3, replicas=1) as cluster:
        yield cluster
        cluster.wait_stable()
