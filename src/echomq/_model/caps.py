"""The caps every layer agrees on, and the integer gates that enforce them.

Rule 1: ``bool`` is not an int here (``True`` is not a lease), and neither is ``1.5`` or
``"10"``; bad values raise :class:`~echomq.errors.InvalidArgument` (a ``ValueError``).
Rule 2: every bound keeps the scripts' arithmetic exact: a score is a double, so
``priority * 2^40 + seq`` and ``now + lease`` stay below 2^53, and a batch stays below
Lua's ``unpack`` limit. Each capped script checks its own cap again (docs/lua.md, rule 8);
tests/test_lua_headers.py keeps the two numbers equal.
"""

from __future__ import annotations

from ..errors import InvalidArgument

__all__ = [
    "MAX_ATTEMPTS",
    "MAX_BATCH",
    "MAX_BEAT_FIELDS",
    "MAX_BUDGET",
    "MAX_COUNT",
    "MAX_ENQUEUE",
    "MAX_FLOW",
    "MAX_FLOW_PAGE",
    "MAX_MINUTES",
    "MAX_HELD",
    "MAX_LIMIT",
    "MAX_MS",
    "MAX_PRIORITY",
    "MAX_REPEAT_PAGE",
    "int_in",
    "non_negative_int",
    "positive_int",
]

MAX_PRIORITY = 4095  # priority * 2^40 + seq must stay exact in a double score
# Caps on the work one script call does: chosen so that no call blocks Redis for more
# than ~10 ms on a queue of 1M jobs (measured by `python -m benchmarks bounds`, table in
# benchmarks/README.md).
MAX_COUNT = 250  # jobs per claim (which also promotes at most 100 due scheduled jobs)
MAX_BATCH = 100  # expired leases per reap / stalled sweep (each may finish a job)
MAX_ENQUEUE = 250  # jobs per enqueue_many call
MAX_FLOW_PAGE = 1000  # a flow parent's children read per flow_results call
MAX_FLOW = 250  # nodes (and held parents released) per add_flow call: a page of a flow
MAX_HELD = 250  # (id, token) pairs per extend_locks / release call
MAX_BUDGET = 500  # jobs (or leftover keys) per drain / obliterate step
MAX_REPEAT_PAGE = 100  # repeat records per repeat_due / repeat_list call
MAX_MS = 2**40  # a lease or delay of ~34 years; now + MAX_MS stays exact in a double
MAX_ATTEMPTS = 1_000_000  # handler failures a job may have; a sane bound, not arithmetic
MAX_MINUTES = 720  # minutes of per-minute counters one stats call reads (3 HGETs each)
MAX_BEAT_FIELDS = 32  # field pairs of one worker heartbeat record
MAX_LIMIT = 1_000_000_000  # a group's concurrency, a rate limit's jobs per period


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def positive_int(name: str, value: object, high: int | None = None) -> int:
    """``value`` if it is an int in [1, high], else InvalidArgument."""
    if not _is_int(value) or value <= 0 or (high is not None and value > high):  # type: ignore[operator]
        bound = f" <= {high}" if high is not None else ""
        raise InvalidArgument(f"{name} must be a positive int{bound}, not {value!r}")
    return value  # type: ignore[return-value]


def non_negative_int(name: str, value: object, high: int | None = None) -> int:
    """``value`` if it is an int in [0, high], else InvalidArgument."""
    if not _is_int(value) or value < 0 or (high is not None and value > high):  # type: ignore[operator]
        bound = f" <= {high}" if high is not None else ""
        raise InvalidArgument(f"{name} must be an int >= 0{bound}, not {value!r}")
    return value  # type: ignore[return-value]


def int_in(name: str, value: object, low: int, high: int) -> int:
    """``value`` if it is an int in [low, high], else InvalidArgument."""
    if not _is_int(value) or not low <= value <= high:  # type: ignore[operator]
        raise InvalidArgument(f"{name} must be an int in [{low}, {high}], not {value!r}")
    return value  # type: ignore[return-value]
