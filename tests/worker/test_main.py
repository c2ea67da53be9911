"""run_worker: loading ``module:attr`` and the exit codes for a bad target."""

from __future__ import annotations

import pytest

import echomq
from echomq.cli.worker_cmd import TargetError, load_target, run_worker


def test_load_target_finds_a_queue_or_a_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """module:attr names a Queue (or a Worker); anything else is refused."""
    monkeypatch.setenv("EMQ_TEST_QUEUE", "loaded")
    monkeypatch.syspath_prepend(str(__import__("pathlib").Path(__file__).parent))
    found = load_target("_proc_tasks:queue")
    assert isinstance(found, echomq.Queue) and found.name == "loaded"
    assert "sleepy" in found.tasks
    for bad in ("no-colon", "_proc_tasks:sleepy", "_proc_tasks:missing", "no_such_module:q"):
        with pytest.raises(TargetError):
            load_target(bad)


def test_run_worker_answers_2_for_a_bad_target() -> None:
    """A target that cannot be loaded exits with code 2, before serving."""
    assert run_worker("no_such_module_here:queue") == 2
