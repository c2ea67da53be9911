"""gc_pace: the collector's young threshold is raised while workers serve, then put back."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
import trio

import echomq
from echomq._worker import gc_pace

from ._runtime import serving


@pytest.fixture
def thresholds() -> Iterator[tuple[int, int, int]]:
    """The process's thresholds, put back whatever a test does."""
    before = gc.get_threshold()
    yield before
    gc.set_threshold(*before)


async def test_serving_workers_raise_the_young_threshold_and_the_last_puts_it_back(
    redis_url: str, queue: str, thresholds: tuple[int, int, int]
) -> None:
    """Two workers serving at once: raised from the first start (older generations
    untouched) to the last stop, then the value found before."""
    gc.set_threshold(700, 11, 12)
    q = echomq.Queue(queue, url=redis_url)

    @q.task
    async def noop() -> None:
        pass

    with trio.fail_after(10):
        async with serving(echomq.Worker(q)):
            assert gc.get_threshold() == (gc_pace.YOUNG, 11, 12)
            async with serving(echomq.Worker(q)):
                assert gc.get_threshold() == (gc_pace.YOUNG, 11, 12)
            assert gc.get_threshold() == (gc_pace.YOUNG, 11, 12)  # one still serves
            assert gc.isenabled()
    assert gc.get_threshold() == (700, 11, 12)


def test_a_higher_threshold_or_a_change_meanwhile_is_left_alone(
    thresholds: tuple[int, int, int],
) -> None:
    """A threshold already above YOUNG is not lowered; one changed by someone else while
    a worker served is theirs afterwards."""
    gc.set_threshold(gc_pace.YOUNG * 2, 10, 10)
    with gc_pace.young_threshold():
        assert gc.get_threshold() == (gc_pace.YOUNG * 2, 10, 10)
    assert gc.get_threshold() == (gc_pace.YOUNG * 2, 10, 10)
    gc.set_threshold(700, 10, 10)
    with gc_pace.young_threshold():
        assert gc.get_threshold()[0] == gc_pace.YOUNG
        gc.set_threshold(5000, 10, 10)
    assert gc.get_threshold() == (5000, 10, 10)
