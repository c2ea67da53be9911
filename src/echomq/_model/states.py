"""Job states as stored on the row, and the transitions the scripts make.

Rule 1: only Lua changes state; the state is stored on the row, never inferred.
Rule 2: cancelled is a terminal outcome of its own: a cancelled job ends in state
``cancelled``, its reason in the row's ``cancel_reason`` (a fenced one too: its grace ran
out; the row also carries ``cancel_fenced``). ``CANCELLED_PREFIX`` is only the worker's
word for a cancelled run in the arguments of ``complete`` / ``complete_many``, never
stored.
Rule 2b: expired is a terminal outcome of its own too: a job with a deadline (its row's
``expires_at``) not started by then is dropped by the claim into ``expired``, kept in the
``dead`` index with the retention of a dead row (docs/runtime.md "Expiry").
Rule 3: ``TRANSITIONS`` is the one table of moves. tests/test_lua_headers.py checks it
against every script's ``Moves`` header line, and tests/model/test_states.py checks that
docs/state-machine.md shows the table and diagram generated from it.
"""

from __future__ import annotations

import enum

__all__ = [
    "CANCELLED_PREFIX",
    "JobState",
    "LIVE_STATES",
    "TERMINAL_STATES",
    "TRANSITIONS",
    "Moves",
]

CANCELLED_PREFIX = "cancelled:"


class JobState(enum.StrEnum):
    """The ``state`` field of a job's row."""

    PENDING = "pending"
    SCHEDULED = "scheduled"
    ACTIVE = "active"
    COMPLETED = "completed"
    DEAD = "dead"
    CANCELLED = "cancelled"
    WAITING = "waiting"  # a flow parent with open children: not pending, not claimable
    EXPIRED = "expired"  # its deadline passed before it started: never run


TERMINAL_STATES = frozenset(
    {JobState.COMPLETED, JobState.DEAD, JobState.CANCELLED, JobState.EXPIRED}
)
LIVE_STATES = frozenset(JobState) - TERMINAL_STATES

# from-state -> to-states; None is "no row" (before enqueue, after a removal).
Moves = dict[JobState | None, frozenset[JobState | None]]

# a finished flow child's parent: its last open child finished (or a dead one fails it)
_PARENT: Moves = {JobState.WAITING: frozenset({JobState.PENDING})}
# a dead job's error callback on its own queue, enqueued where it dies (docs/flows.md)
_ERRBACK: Moves = {None: frozenset({JobState.PENDING})}

# script name -> its moves. A script that changes no state has no entry.
TRANSITIONS: dict[str, Moves] = {
    "enqueue": {None: frozenset({JobState.PENDING, JobState.SCHEDULED})},
    # flows (docs/flows.md): a tree in one call; a held parent released by the last page
    "add_flow": {
        None: frozenset({JobState.PENDING, JobState.SCHEDULED, JobState.WAITING}),
        JobState.WAITING: frozenset({JobState.PENDING}),
    },
    # a job past its deadline is dropped, never run (expired: finished, the retention of
    # a dead row; its flow parent told of a failed child, its error callback enqueued)
    "claim": {
        JobState.SCHEDULED: frozenset({JobState.PENDING, JobState.EXPIRED}),
        JobState.PENDING: frozenset({JobState.ACTIVE, JobState.EXPIRED}),
        JobState.DEAD: frozenset({None}),
        JobState.EXPIRED: frozenset({None}),
        **_PARENT,
        **_ERRBACK,
    },
    # a finishing script also applies its set's retention (include/finished.lua): it
    # deletes other rows past the count cap (and 0.1 rows whose time is up); a row whose
    # TTL ends is deleted by Redis itself, outside any script
    # (and a flow parent whose last open child finished becomes pending: _PARENT)
    # (a run the worker settles as cancelled ends in ``cancelled``, kept as completed is)
    "complete": {
        JobState.ACTIVE: frozenset({JobState.COMPLETED, JobState.CANCELLED}),
        JobState.COMPLETED: frozenset({None}),
        JobState.CANCELLED: frozenset({None}),
        **_PARENT,
    },
    "complete_many": {
        JobState.ACTIVE: frozenset({JobState.COMPLETED, JobState.CANCELLED}),
        JobState.COMPLETED: frozenset({None}),
        JobState.CANCELLED: frozenset({None}),
        **_PARENT,
    },
    # a child's outcome relayed from its queue's outbox (docs/flows.md "Across queues");
    # a `reopen` (the child reprocessed) re-opens the parent's wait, as reprocess_job does
    "flow_notify": {
        **_PARENT,
        JobState.PENDING: frozenset({JobState.WAITING}),
        JobState.DEAD: frozenset({JobState.WAITING}),
    },
    "fail": {
        JobState.ACTIVE: frozenset({JobState.SCHEDULED, JobState.PENDING, JobState.DEAD}),
        JobState.DEAD: frozenset({None}),
        JobState.EXPIRED: frozenset({None}),
        **_PARENT,
        **_ERRBACK,
    },
    "reap": {
        JobState.ACTIVE: frozenset({JobState.PENDING, JobState.DEAD}),
        JobState.DEAD: frozenset({None}),
        JobState.EXPIRED: frozenset({None}),
        **_PARENT,
        **_ERRBACK,
    },
    "stalled_check": {
        JobState.ACTIVE: frozenset({JobState.PENDING, JobState.DEAD}),
        JobState.DEAD: frozenset({None}),
        JobState.EXPIRED: frozenset({None}),
        **_PARENT,
        **_ERRBACK,
    },
    "release": {JobState.ACTIVE: frozenset({JobState.PENDING})},
    # the retention sweep: an index entry whose row is gone leaves; a row of echomq 0.1
    # (no TTL) whose time is up is deleted (a cancelled one: migrated from layout 1)
    "retention_sweep": {
        JobState.COMPLETED: frozenset({None}),
        JobState.DEAD: frozenset({None}),
        JobState.CANCELLED: frozenset({None}),
    },
    # a durable sleep (docs/steps.md): the job schedules itself, nothing counted
    "sleep": {JobState.ACTIVE: frozenset({JobState.SCHEDULED})},
    # a running job waits for the children it spawned (docs/flows.md "Dynamic children")
    "wait_children": {JobState.ACTIVE: frozenset({JobState.WAITING})},
    # an in-task back-off (docs/lanes.md): scheduled, nothing counted; its group or queue
    # blocked until then
    "rate_limited": {JobState.ACTIVE: frozenset({JobState.SCHEDULED})},
    # the operator plane (docs/operations.md)
    # a dead flow child reprocessed re-opens its parent's wait (dead | pending -> waiting)
    "reprocess_job": {
        JobState.DEAD: frozenset({JobState.PENDING, JobState.WAITING}),
        JobState.PENDING: frozenset({JobState.WAITING}),
    },
    # a removed child's parent stops waiting for it (it may become pending)
    "remove_job": {
        **{state: frozenset({None}) for state in JobState},
        JobState.WAITING: frozenset({None, JobState.PENDING}),
    },
    # a page of a flow's cancel or removal (docs/flows.md): cancel removes its waiting
    # jobs, remove every job; the subtree's top tells its parent (which may become pending)
    "flow_cancel": {
        **{state: frozenset({None}) for state in JobState},
        JobState.WAITING: frozenset({None, JobState.PENDING}),
    },
    # cancel removes a waiting job (a flow parent too); an active one gets a flag (its
    # worker settles it cancelled later), or, with no grace left (grace=0), is fenced:
    # settled cancelled at once (finished, with the retention of a completed row); a
    # finished child's parent may become pending
    "cancel": {
        JobState.PENDING: frozenset({None}),
        JobState.SCHEDULED: frozenset({None}),
        JobState.ACTIVE: frozenset({JobState.CANCELLED}),
        JobState.CANCELLED: frozenset({None}),
        JobState.WAITING: frozenset({None, JobState.PENDING}),
    },
    # a cancel whose grace ran out: settled cancelled, its attempt fenced (docs/runtime.md)
    "fence_cancels": {
        JobState.ACTIVE: frozenset({JobState.CANCELLED}),
        JobState.PENDING: frozenset({JobState.CANCELLED}),
        JobState.SCHEDULED: frozenset({JobState.CANCELLED}),
        JobState.CANCELLED: frozenset({None}),
        **_PARENT,
    },
    "drain": {
        JobState.PENDING: frozenset({None}),
        JobState.SCHEDULED: frozenset({None}),
    },
    "obliterate": {state: frozenset({None}) for state in JobState},
}
