"""The retention settings: one set of defaults, written in the Lua and read by Python;
values checked before any I/O (docs/results.md)."""

from __future__ import annotations

import re

import pytest

from echomq._model import caps as limits
from echomq._model.caps import lua_table
from echomq._model.options import EnqueueOptions, TaskOptions
from echomq._model.retention import METRICS_KEEP_MINUTES, Retention, keep_ms
from echomq._scripts.loader import INCLUDES, SCRIPTS, include_lines
from echomq.errors import InvalidArgument


def test_the_defaults_are_the_scripts_own() -> None:
    """Every retention setting Python knows, and its default, is include/retention.lua's
    RETENTION_DEFAULTS (read at import), which the scripts read too: the finishing scripts,
    add_log (max_log_lines) and set_retention (the names); the per-minute counters live as
    long as a stats call may read them (MAX_MINUTES)."""
    lua = lua_table(INCLUDES["retention"], "RETENTION_DEFAULTS")
    assert lua == dict(Retention.defaults_ms())
    assert tuple(lua) == Retention.names()
    assert "retention" in SCRIPTS["add_log"].uses and "retention" in SCRIPTS["set_retention"].uses
    assert "retention" in include_lines(INCLUDES["finished"])
    assert "RETENTION_DEFAULTS.max_log_lines" in SCRIPTS["add_log"].source
    keep = re.search(r"^local METRICS_KEEP_MS = (.*)$", INCLUDES["finished"], re.M)
    assert keep and keep[1] == "MAX_MINUTES * 60000 + 120000"
    assert METRICS_KEEP_MINUTES == limits.MAX_MINUTES
    assert Retention().max_log_lines == lua["max_log_lines"]


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
