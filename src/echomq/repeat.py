"""Repeatable jobs: the registry verbs and the scheduler's pass (docs/repeat.md).

Each takes ``conn, queue`` first, gates its arguments before any I/O, and answers a value
or raises a typed error from :mod:`echomq.errors` having changed nothing.

- ``add``: register a repeatable under a key (an upsert: the same schedule keeps its next
  slot), with an interval or a cron expression in a time zone (``Schedule.of``).
- ``remove``, ``pause``, ``resume``, ``get``, ``list_repeats``: the registry.
- ``tick``: one scheduler pass (every worker runs it in a loop): each due run enqueued
  exactly once, however many workers race, through the enqueue script.

``queue.repeat(task, every=... | cron=...)`` and ``@queue.task(cron=...)`` are the
application's spelling of ``add``. This module is the public face; the implementation
lives in ``echomq._verbs.repeat``.
"""

from __future__ import annotations

from ._model.repeat import RepeatInfo, run_id
from ._model.schedule import DEFAULT_GRACE_MS, MISSED_POLICIES, MissedPolicy, Plan, Schedule
from ._verbs.repeat import (
    MAX_PAGE,
    Added,
    DueBatch,
    FireOutcome,
    RepeatListing,
    Tick,
    add,
    get,
    list_repeats,
    pause,
    remove,
    resume,
    tick,
)

__all__ = [
    "DEFAULT_GRACE_MS",
    "MAX_PAGE",
    "MISSED_POLICIES",
    "Added",
    "DueBatch",
    "FireOutcome",
    "MissedPolicy",
    "Plan",
    "RepeatInfo",
    "RepeatListing",
    "Schedule",
    "Tick",
    "add",
    "get",
    "list_repeats",
    "pause",
    "remove",
    "resume",
    "run_id",
    "tick",
]
