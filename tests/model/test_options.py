"""Options as values: ``TaskOptions`` and ``EnqueueOptions`` are the one place their
options are declared; ``@queue.task(**fields)`` and ``task.apply(**fields)`` reach them."""

from __future__ import annotations

import datetime as dt
import time

import pytest

import echomq
from echomq._model.options import EnqueueOptions, TaskOptions, build_options
from echomq.errors import InvalidArgument, InvalidKey


def test_enqueue_options_resolve_against_the_tasks_defaults() -> None:
    task = TaskOptions(priority=3, max_attempts=4)
    new = EnqueueOptions(delay=1.5, job_id="j-1").new_job(b"p", task)
    assert (new.job_id, new.delay_ms, new.priority, new.max_attempts) == ("j-1", 1500, 3, 4)
    new = EnqueueOptions(priority=-1, max_attempts=1).new_job(b"p", task)
    assert (new.delay_ms, new.priority, new.max_attempts) == (0, -1, 1)
    soon = EnqueueOptions(at=time.time() + 60).new_job(b"p", task)
    assert 55_000 < soon.delay_ms <= 60_000
    past = EnqueueOptions(at=dt.datetime(2000, 1, 1)).new_job(b"p", task)
    assert past.delay_ms == 0


@pytest.mark.parametrize(
    "fields",
    [
        {"delay": 1, "at": 2},
        {"delay": -1},
        {"delay": float("nan")},
        {"delay": True},
        {"priority": 4096},
        {"max_attempts": 0},
        {"at": "tomorrow"},
    ],
)
def test_enqueue_options_refuse_bad_values_when_built(fields: dict[str, object]) -> None:
    with pytest.raises(InvalidArgument):
        EnqueueOptions(**fields)  # type: ignore[arg-type]


def test_enqueue_options_gate_the_job_id() -> None:
    with pytest.raises(InvalidKey):
        EnqueueOptions(job_id="no spaces")


def test_build_options_merges_and_refuses_unknown_names() -> None:
    base = EnqueueOptions(delay=5)
    assert build_options(EnqueueOptions, base, {"priority": 2}) == EnqueueOptions(
        delay=5, priority=2
    )
    assert build_options(EnqueueOptions, None, {}) == EnqueueOptions()
    with pytest.raises(InvalidArgument, match="unknown option"):
        build_options(EnqueueOptions, None, {"dely": 5})
    with pytest.raises(InvalidArgument):
        build_options(EnqueueOptions, TaskOptions(), {})  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="unknown option"):
        build_options(TaskOptions, None, {"retries": 3})


def test_the_api_takes_options_as_keywords_or_one_value() -> None:
    """``@queue.task(**fields)`` / ``options=``, and ``apply``'s twin ``new_job``."""
    queue = echomq.Queue("options-test")

    @queue.task(options=echomq.TaskOptions(priority=7), max_attempts=3)
    async def hello(name: str) -> str:
        return name

    assert (hello.options.priority, hello.options.max_attempts) == (7, 3)
    one = hello.new_job(("a",), delay=2)
    two = hello.new_job(("a",), options=echomq.EnqueueOptions(delay=2))
    assert (one.delay_ms, one.priority, one.max_attempts) == (2000, 7, 3)
    assert (two.delay_ms, two.priority, two.payload) == (2000, 7, one.payload)
    with pytest.raises(InvalidArgument, match="unknown option"):
        hello.new_job(("a",), retries=3)
    with pytest.raises(InvalidArgument, match="unknown option"):
        queue.task(retries=3)
