"""``_jitter.Backoff``: the one backoff of every reconnect and restart loop."""

from __future__ import annotations

import pytest

from echomq._jitter import Backoff


def test_delays_start_low_grow_to_high_and_spread() -> None:
    backoff = Backoff(0.1, 1.0)
    assert backoff.next() == 0.1  # the first retry comes after `low`
    delays = [backoff.next() for _ in range(200)]
    assert all(0.1 <= d <= 1.0 for d in delays)
    assert backoff.ceiling == 1.0
    assert len({round(d, 6) for d in delays[-100:]}) > 50  # jittered, not in lockstep
    backoff.reset()
    assert backoff.ceiling == 0.1 and backoff.next() == 0.1


def test_bounds_are_checked() -> None:
    for low, high in ((0, 1), (2, 1), (-1, 1)):
        with pytest.raises(ValueError):
            Backoff(low, high)
