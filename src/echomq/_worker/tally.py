"""What a worker's jobs did: its counters, and per task the outcomes and run times.

Rule 1 (the hot path): recording one job is a dict lookup, an increment and a bisect on a
tuple: no lock (one trio thread), no metrics library, no allocation once a task was seen.
The Prometheus families are built from these numbers only when scraped
(``_worker/metrics.py``), so a worker whose metrics nobody reads pays for the counts only.
Rule 2: outcomes are ``completed``, ``cancelled``, ``retried`` (a failure with an attempt
left), ``dead``, ``lost`` (the lease was lost: a newer holder owns the job). The run time
is the handler's (decode to result), not the settling.
Rule 3: the wait of a job is the time from its due time (its enqueue, or its ``run_at``: a
delayed job, a retry) to its start here: the server's milliseconds up to the claim (the
claim answers them, ``Claimed.waited_ms``) plus this worker's own time from the claim to
the start (a prefetched job waits for its slot). Recorded when the handler starts.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from typing import Protocol

import attrs

__all__ = ["BUCKETS", "OUTCOMES", "WAIT_BUCKETS", "Counters", "Run", "Tally", "TaskTally"]

#: upper bounds (seconds) of the run-time histogram's buckets; the last bucket is +Inf
BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 300.0,
)  # fmt: skip
#: upper bounds (seconds) of the wait histogram's buckets (rule 3); the last is +Inf
WAIT_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
    900.0, 3600.0,
)  # fmt: skip
OUTCOMES = ("completed", "cancelled", "retried", "dead", "lost")


@attrs.define
class Counters:
    """What this worker did, for ``Worker.statistics()`` and its heartbeat record."""

    claimed: int = 0
    completed: int = 0
    failed: int = 0
    retried: int = 0
    cancelled: int = 0
    lost: int = 0
    released: int = 0
    abandoned: int = 0  # threads left running after a hard stop (their outcome unused)
    terminated: int = 0  # process children killed by a hard stop (replaced)


class Run(Protocol):
    """One finished attempt as :meth:`Tally.record_many` reads it (a held job)."""

    @property
    def task(self) -> str | None: ...

    @property
    def ran(self) -> float | None: ...


class TaskTally:
    """One task's numbers: outcome counts, and the run-time histogram (not cumulative:
    ``buckets[i]`` counts runs in ``(BUCKETS[i-1], BUCKETS[i]]``, the last one above all)."""

    __slots__ = ("buckets", "outcomes", "seconds", "wait_buckets", "waited")

    def __init__(self) -> None:
        self.outcomes = dict.fromkeys(OUTCOMES, 0)
        self.buckets = [0] * (len(BUCKETS) + 1)
        self.seconds = 0.0
        self.wait_buckets = [0] * (len(WAIT_BUCKETS) + 1)  # rule 3, as ``buckets``
        self.waited = 0.0

    def wait(self, seconds: float) -> None:
        """Rule 3: a job of the task started ``seconds`` after it was due."""
        self.wait_buckets[bisect_left(WAIT_BUCKETS, seconds)] += 1
        self.waited += seconds

    @property
    def runs(self) -> int:
        """Runs timed (the histogram's count)."""
        return sum(self.buckets)


class Tally:
    """Every task's numbers for one worker (``settle.Settler.tally``)."""

    __slots__ = ("tasks",)

    def __init__(self) -> None:
        self.tasks: dict[str, TaskTally] = {}

    def task(self, name: str) -> TaskTally:
        """``name``'s numbers (made at the first ask: the runner keeps it per task)."""
        tally = self.tasks.get(name)
        if tally is None:
            tally = self.tasks[name] = TaskTally()
        return tally

    def record(self, task: str | None, outcome: str, seconds: float | None) -> None:
        """Count one finished attempt of ``task`` (None: the payload could not be decoded,
        counted under ``""``); ``seconds``: its handler's run time (None when it did not
        run: an undecodable payload, an unknown task)."""
        name = task or ""
        tally = self.tasks.get(name)
        if tally is None:
            tally = self.tasks[name] = TaskTally()
        tally.outcomes[outcome] += 1
        if seconds is not None:
            tally.buckets[bisect_left(BUCKETS, seconds)] += 1
            tally.seconds += seconds

    def record_wait(self, task: str, seconds: float) -> None:
        """Rule 3: ``task``'s job started ``seconds`` after it was due."""
        self.task(task).wait(seconds)

    def record_many(self, runs: Iterable[Run], outcome: str) -> None:
        """:meth:`record` each of ``runs`` (its ``task`` and ``ran``), all with ``outcome``
        (a batch of completions: the task looked up once per run of the same name)."""
        tasks = self.tasks
        name: str | None = None
        tally: TaskTally | None = None
        count = 0
        for run in runs:
            task = run.task or ""
            if task != name or tally is None:
                if tally is not None:
                    tally.outcomes[outcome] += count
                name, count = task, 0
                tally = tasks.get(task)
                if tally is None:
                    tally = tasks[task] = TaskTally()
            count += 1
            seconds = run.ran
            if seconds is not None:
                tally.buckets[bisect_left(BUCKETS, seconds)] += 1
                tally.seconds += seconds
        if tally is not None:
            tally.outcomes[outcome] += count
