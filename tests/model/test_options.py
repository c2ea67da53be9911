"""Options as values: ``TaskOptions`` and ``EnqueueOptions`` are the one place their
options are declared; ``@queue.task(**fields)`` and ``task.apply(**fields)`` reach them."""

from __future__ import annotations

import datetime as dt
import time

import attrs
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


def test_a_plain_delay_reuses_the_checked_defaults() -> None:
    """No options given: one shared, frozen ``EnqueueOptions()`` (checked once), and the
    task's own options (checked at registration) resolve the job as before."""
    first = build_options(EnqueueOptions, None, {})
    assert build_options(EnqueueOptions, None, {}) is first
    given = EnqueueOptions(priority=1)
    assert build_options(EnqueueOptions, given, {}) is given
    task = TaskOptions(priority=2, max_attempts=5, keep_result=1.5, keep_dead=0)
    new = first.new_job(b"p", task, "t")
    assert (new.delay_ms, new.priority, new.max_attempts, new.task) == (0, 2, 5, "t")
    assert (new.keep_result_ms, new.keep_dead_ms, new.job_id, new.dedup) == (1500, 0, None, None)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        first.delay = 5  # type: ignore[misc]


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


def test_a_group_is_a_name_or_a_callable_of_the_arguments() -> None:
    """group= picks the job's lane: a name, or a callable of the job's arguments (an int
    answer is its text; None: no group); the enqueue's value wins over the task's."""
    task = TaskOptions(group=lambda customer, **_: customer, group_concurrency=2)
    new = EnqueueOptions().new_job(b"p", task, args=("acme",), kwargs={"n": 1})
    assert (new.group, new.group_concurrency) == ("acme", 2)
    assert EnqueueOptions().new_job(b"p", task, args=(42,)).group == "42"
    assert EnqueueOptions().new_job(b"p", task, args=(None,)).group is None
    assert EnqueueOptions().new_job(b"p", task, args=(None,)).group_concurrency is None
    assert EnqueueOptions(group="vip").new_job(b"p", task, args=("acme",)).group == "vip"
    assert EnqueueOptions().new_job(b"p", TaskOptions()).group is None


@pytest.mark.parametrize("group", ["a b", "", "x" * 129, "{q}", 3.5, b"raw"])
def test_a_bad_group_is_refused_when_the_options_are_built(group: object) -> None:
    with pytest.raises(InvalidKey):
        TaskOptions(group=group)  # type: ignore[arg-type]
    with pytest.raises(InvalidKey):
        EnqueueOptions(group=group)  # type: ignore[arg-type]


def test_a_group_callable_that_fails_or_answers_a_bad_name_refuses_the_enqueue() -> None:
    def boom(*args: object) -> str:
        raise KeyError("customer")

    with pytest.raises(InvalidArgument, match="raised"):
        EnqueueOptions().new_job(b"p", TaskOptions(group=boom))
    with pytest.raises(InvalidKey):
        EnqueueOptions().new_job(b"p", TaskOptions(group=lambda: "no spaces"))


@pytest.mark.parametrize("limit", [0, -1, 1.5, True])
def test_group_concurrency_is_a_positive_int(limit: object) -> None:
    with pytest.raises(InvalidArgument):
        TaskOptions(group_concurrency=limit)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        EnqueueOptions(group_concurrency=limit)  # type: ignore[arg-type]


def test_group_concurrency_at_enqueue_needs_a_group() -> None:
    with pytest.raises(InvalidArgument, match="needs a group"):
        EnqueueOptions(group_concurrency=2).new_job(b"p", TaskOptions())


def test_repeated_builds_answer_the_same_fields_per_task_name_and_options() -> None:
    """A bulk enqueue builds the fields of one (options, task, name) once: the same job
    each time but for the payload; another name or other options are their own."""
    shared = TaskOptions(priority=3, keep_result=60)
    options = EnqueueOptions(max_attempts=2)
    first = options.new_job(b"a", shared, "one")
    again = options.new_job(b"b", shared, "one")
    assert attrs.evolve(first, payload=b"b") == again
    other = options.new_job(b"c", shared, "two")
    assert other.task == "two" and other.priority == 3 and other.keep_result_ms == 60_000
    assert EnqueueOptions().new_job(b"d", shared, "one").max_attempts == shared.max_attempts
    # a group callable is called per job, a delay read per job
    picked = TaskOptions(group=lambda who: who)
    assert [EnqueueOptions().new_job(b"p", picked, "g", args=(w,)).group for w in "xy"] == [
        "x",
        "y",
    ]
    later = EnqueueOptions(at=time.time() + 60)
    assert 0 < later.new_job(b"p", shared, "one").delay_ms <= 60_000
