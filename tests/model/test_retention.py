"""The retention settings: one set of defaults, held by Python and by the scripts alike;
values checked before any I/O (docs/results.md)."""

from __future__ import annotations

import re

import pytest

from echomq._model import caps as limits
from echomq._model.options import EnqueueOptions, TaskOptions
from echomq._model.retention import METRICS_KEEP_MINUTES, Retention, keep_ms
from echomq._scripts.calls import INCLUDES, SCRIPTS
from echomq.errors import InvalidArgument


def _lua_number(expr: str) -> int:
    """A Lua constant expression of this include (``7 * DAY_MS``, ``720 * 60000 + 120000``)."""
    day = re.search(r"^local DAY_MS = (\d+)$", INCLUDES["finished"], re.MULTILINE)
    assert day
    return int(eval(expr.replace("DAY_MS", day[1]), {"__builtins__": {}}))  # digits and * + only


def test_the_scripts_hold_the_same_defaults() -> None:
    """include/finished.lua's FINISH_DEFAULTS and add_log.lua's DEFAULT_LOG_LINES are
    Retention's defaults; the counters' TTL is METRICS_KEEP_MINUTES (+ 2 minutes)."""
    block = re.search(r"local FINISH_DEFAULTS = \{(.*?)\}", INCLUDES["finished"], re.S)
    assert block
    lua = {k: _lua_number(v) for k, v in re.findall(r"(\w+) = ([\d\s*+A-Z_]+)", block[1])}
    logs = re.search(r"^local DEFAULT_LOG_LINES = (\d+)$", SCRIPTS["add_log"].source, re.M)
    assert logs
    lua["max_log_lines"] = int(logs[1])
    assert lua == dict(Retention.defaults_ms())
    keep = re.search(r"^local METRICS_KEEP_MS = ([\d\s*+]+)", INCLUDES["finished"], re.M)
    assert keep and _lua_number(keep[1]) == METRICS_KEEP_MINUTES * 60_000 + 120_000
    assert METRICS_KEEP_MINUTES == limits.MAX_MINUTES


@pytest.mark.parametrize("value", [-1, float("nan"), float("inf"), "5", True, None, 2**41])
def test_bad_keeps_are_refused_when_the_options_are_made(value: object) -> None:
    with pytest.raises(InvalidArgument):
        keep_ms("keep_result", value)
    if value is not None:
        with pytest.raises(InvalidArgument):
            TaskOptions(keep_result=value)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument):
            EnqueueOptions(keep_dead=value)  # type: ignore[arg-type]


def test_the_apply_wins_over_the_task_and_none_is_the_queues() -> None:
    task = TaskOptions(keep_result=60, keep_dead=0)
    job = EnqueueOptions(keep_result=1.5).new_job(b"p", task, "t.x")
    assert (job.keep_result_ms, job.keep_dead_ms, job.task) == (1500, 0, "t.x")
    plain = EnqueueOptions().new_job(b"p", TaskOptions())
    assert (plain.keep_result_ms, plain.keep_dead_ms, plain.task) == (None, None, None)


def test_meta_args_and_from_meta() -> None:
    assert Retention.meta_args({"keep_result": 2.5, "max_dead": 10, "keep_dead": None}) == [
        "keep_result", "2500", "max_dead", "10", "keep_dead", "",
    ]  # fmt: skip
    got = Retention.from_meta({"keep_result": 2500, "max_dead": 10, "keep_dead": None})
    assert (got.keep_result, got.max_dead, got.keep_dead) == (2.5, 10, 7 * 86_400.0)
    assert got.explicit == {"keep_result", "max_dead"}
    with pytest.raises(InvalidArgument):
        Retention.meta_args({"keep_forever": 1})
    with pytest.raises(InvalidArgument):
        Retention.meta_args({})
