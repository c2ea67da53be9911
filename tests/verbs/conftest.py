"""Fixtures for the lifecycle verb tests (helpers live in ``_support.py``)."""

from __future__ import annotations

import pytest

from echomq._scripts.keyspace import Keyspace


@pytest.fixture
def ks(queue: str) -> Keyspace:
    return Keyspace(queue)
