"""The worker's per-task numbers (``_worker/tally.py``): a batch of completions recorded at
once (``record_many``) leaves the same numbers as recording each run alone."""

from __future__ import annotations

import attrs

from echomq._worker.tally import BUCKETS, Tally


@attrs.define
class _Run:
    task: str | None
    ran: float | None


RUNS = [
    _Run("a", 0.0005),
    _Run("a", 0.02),
    _Run("b", 3.0),
    _Run("a", None),  # did not run (not timed), still counted
    _Run(None, None),  # an undecodable payload: counted under ""
    _Run("b", 1000.0),  # past the last bound: the +Inf bucket
    _Run("a", 0.0005),
]


def numbers(tally: Tally) -> dict[str, tuple[dict[str, int], list[int], float]]:
    return {
        name: (dict(t.outcomes), list(t.buckets), round(t.seconds, 9))
        for name, t in tally.tasks.items()
    }


def test_record_many_counts_as_record_does_for_each_run() -> None:
    one_by_one, batched = Tally(), Tally()
    for run in RUNS:
        one_by_one.record(run.task, "completed", run.ran)
    one_by_one.record("a", "lost", 0.1)
    batched.record_many(RUNS[:3], "completed")
    batched.record_many([], "completed")
    batched.record_many(RUNS[3:], "completed")
    batched.record("a", "lost", 0.1)
    assert numbers(batched) == numbers(one_by_one)
    a = batched.tasks["a"]
    assert a.outcomes["completed"] == 4 and a.outcomes["lost"] == 1 and a.runs == 4
    assert batched.tasks[""].outcomes["completed"] == 1
    assert batched.tasks["b"].buckets[len(BUCKETS)] == 1
