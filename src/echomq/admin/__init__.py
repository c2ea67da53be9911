"""The queue-scope operator verbs (docs/operations.md), and the views the CLI and dashboard read.

Each takes ``conn, queue`` first (``list_queues`` takes only ``conn``), gates its arguments
before any I/O, and either answers a value or raises a typed error from
:mod:`echomq.errors` having changed nothing.

- ``pause`` / ``resume`` / ``is_paused``: the claim gate (the ``paused`` field of
  ``emq:{q}:meta``), read by the claim script itself; idempotent; the backlog is untouched.
- ``drain`` (``drain_step``): delete the backlog a ``budget`` of jobs per script call.
- ``obliterate`` (``obliterate_step``, ``obliterate_all``): destroy a paused queue, a
  ``budget`` of jobs per call, down to its last ``emq:{q}:*`` key.
- ``stats``: counts per state, the gate, and throughput by the minute, in one atomic read.
- ``set_retention`` / ``retention``: how long finished jobs and completions entries are
  kept, and the count caps that guard memory (docs/results.md).
- ``sweep_retention``: one bounded call of the retention sweep every worker runs at its
  recovery tick: the indexes and the completions stream lose what retention ended.
- ``ensure_schema``: the queue's data layout version, written if absent, refused
  (``SchemaMismatch``) if not this echomq's; every worker calls it at start.
- ``migrate`` (``migrate_step``): a queue of an older layout rewritten to this echomq's, a
  page of keys per call (``echomq migrate QUEUE``).
- ``list_queues``: every queue (a queue exists when it has ``emq:{q}:meta``), every master;
  ``queue_exists`` / ``require_queue`` (raises ``QueueNotFound``): one queue, one ``EXISTS``.
- ``active_jobs`` / ``dead_jobs``: typed rows of the jobs held now / dead-lettered;
  ``list_jobs``: the ids a state holds, newest first, with a few fields (``JobRow``);
  ``server_now_ms``: the server's clock, the one every lease is scored on.
- ``list_workers``: the workers serving the queue, from their heartbeat records
  (``WorkerRecord``: alive or gone, blocked or running, what they hold).
- ``reprocess_dead``: dead jobs back to pending in bulk (``reprocess_job`` per id, a
  pipelined batch per round trip, bounded by the dead count at the start).
- ``set_concurrency`` / ``set_group_concurrency`` / ``set_rate_limit`` / ``limits``: the
  queue's concurrency across its workers, the group lanes' limits and the rate limits,
  changed at run time; ``groups`` / ``group``: per-group counts and
  standing (docs/lanes.md).

The package's modules: ``queues`` (the queue-scope verbs), ``discovery``, ``views``,
``reprocess``, ``workers`` and ``limits``.
"""

from __future__ import annotations

from .discovery import list_queues, queue_exists, require_queue
from .limits import (
    RATE_KINDS,
    Limits,
    RateKind,
    RateLimit,
    limits,
    set_concurrency,
    set_group_concurrency,
    set_rate_limit,
)
from .limits import lanes_rejoin_call as lanes_rejoin_call
from .limits import set_limits_call as set_limits_call
from .queues import (
    DEFAULT_BUDGET,
    MAX_BUDGET,
    MAX_STATS_MINUTES,
    MAX_SWEEP,
    THROUGHPUT_WINDOW_MS,
    Capped,
    DrainStep,
    MigrateStep,
    ObliterateStep,
    QueueStats,
    Retention,
    RetentionSweep,
    capped,
    drain,
    drain_step,
    ensure_schema,
    is_paused,
    migrate,
    migrate_step,
    obliterate,
    obliterate_all,
    obliterate_step,
    pause,
    resume,
    retention,
    set_retention,
    stats,
    sweep_retention,
)
from .queues import drain_call as drain_call  # builders (no I/O), for other drivers
from .queues import ensure_schema_call as ensure_schema_call
from .queues import migrate_call as migrate_call
from .queues import obliterate_call as obliterate_call
from .queues import pause_call as pause_call
from .queues import resume_call as resume_call
from .queues import set_retention_call as set_retention_call
from .queues import stats_call as stats_call
from .queues import sweep_retention_call as sweep_retention_call
from .reprocess import (
    DEFAULT_REPROCESS_BATCH,
    MAX_REPROCESS_BATCH,
    Reprocessed,
    reprocess_dead,
)
from .views import (
    JOB_STATES,
    MAX_SCAN,
    MAX_VIEW,
    ActiveRow,
    DeadRow,
    GroupRow,
    JobPage,
    JobRow,
    active_jobs,
    dead_jobs,
    group,
    groups,
    list_jobs,
    server_now_ms,
)
from .workers import WorkerList, WorkerRecord, list_workers
from .workers import list_workers_call as list_workers_call

__all__ = [
    "DEFAULT_BUDGET",
    "DEFAULT_REPROCESS_BATCH",
    "JOB_STATES",
    "MAX_BUDGET",
    "MAX_REPROCESS_BATCH",
    "MAX_SCAN",
    "MAX_STATS_MINUTES",
    "MAX_SWEEP",
    "MAX_VIEW",
    "THROUGHPUT_WINDOW_MS",
    "ActiveRow",
    "Capped",
    "DeadRow",
    "DrainStep",
    "GroupRow",
    "JobPage",
    "JobRow",
    "Limits",
    "MigrateStep",
    "ObliterateStep",
    "QueueStats",
    "RATE_KINDS",
    "RateKind",
    "RateLimit",
    "Retention",
    "RetentionSweep",
    "Reprocessed",
    "WorkerList",
    "WorkerRecord",
    "active_jobs",
    "capped",
    "dead_jobs",
    "drain",
    "drain_step",
    "ensure_schema",
    "group",
    "groups",
    "is_paused",
    "limits",
    "list_jobs",
    "list_queues",
    "list_workers",
    "migrate",
    "migrate_step",
    "obliterate",
    "obliterate_all",
    "obliterate_step",
    "pause",
    "queue_exists",
    "reprocess_dead",
    "require_queue",
    "resume",
    "retention",
    "server_now_ms",
    "set_retention",
    "set_concurrency",
    "set_group_concurrency",
    "set_rate_limit",
    "stats",
    "sweep_retention",
]
