"""Job states as stored on the row, and the transitions the scripts make.

Rule 1: only Lua changes state; the state is stored on the row, never inferred.
Rule 2: there is no cancelled state: a cancelled job completes with ``cancelled:<reason>``.
"""

from __future__ import annotations

import enum

__all__ = ["JobState", "TERMINAL_STATES", "TRANSITIONS", "CANCELLED_PREFIX"]

CANCELLED_PREFIX = "cancelled:"


class JobState(enum.StrEnum):
    PENDING = "pending"
    SCHEDULED = "scheduled"
    ACTIVE = "active"
    COMPLETED = "completed"
    DEAD = "dead"


TERMINAL_STATES = frozenset({JobState.COMPLETED, JobState.DEAD})

# (script, from-state) -> to-states. None is "no row yet". Checked against each script's
# "Moves" header line by tests/test_lua_headers.py.
TRANSITIONS: dict[str, dict[JobState | None, frozenset[JobState]]] = {
    "enqueue": {None: frozenset({JobState.PENDING, JobState.SCHEDULED})},
    "claim": {
        JobState.SCHEDULED: frozenset({JobState.PENDING}),
        JobState.PENDING: frozenset({JobState.ACTIVE}),
    },
    "complete": {JobState.ACTIVE: frozenset({JobState.COMPLETED})},
    "fail": {JobState.ACTIVE: frozenset({JobState.SCHEDULED, JobState.PENDING, JobState.DEAD})},
    "reap": {JobState.ACTIVE: frozenset({JobState.PENDING})},
    "stalled_check": {JobState.ACTIVE: frozenset({JobState.PENDING, JobState.DEAD})},
    "release": {JobState.ACTIVE: frozenset({JobState.PENDING})},
}
