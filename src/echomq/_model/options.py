"""Options as values: a task's (``TaskOptions``) and, later, one enqueue's.

Rule 1: the API speaks float seconds; the verbs speak integer milliseconds. The one
conversion is :func:`to_ms`, and every seconds value is gated by :func:`seconds` first
(a finite number, within the scripts' cap :data:`~echomq._model.backoff.MAX_DELAY`).
Rule 2: an option is checked when its value object is built (at ``@queue.task``, at
``apply``), against the same caps the scripts enforce, so a bad option fails at import or
before any I/O, never when a job fails.
"""

from __future__ import annotations

import math

import attrs

from ..errors import InvalidArgument
from . import limits
from .backoff import MAX_DELAY, Backoff, check_backoff

__all__ = ["DEFAULT_LEASE", "TaskOptions", "seconds", "to_ms"]

DEFAULT_LEASE = 30.0  # seconds of a lease, unless the task says otherwise


def seconds(
    name: str, value: object, *, allow_zero: bool = True, high: float | None = None
) -> float:
    """``value`` as float seconds: finite, >= 0 (> 0 without ``allow_zero``), <= ``high``.

    Raises:
        InvalidArgument: anything else (a bool is not a number here).
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidArgument(f"{name} must be a finite number of seconds, not {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise InvalidArgument(f"{name} must be {'>=' if allow_zero else '>'} 0, not {value!r}")
    if high is not None and value > high:
        raise InvalidArgument(f"{name} must be at most {high:.0f} seconds, not {value!r}")
    return float(value)


def to_ms(name: str, value: float) -> int:
    """Float seconds (the API) to integer milliseconds (the verbs)."""
    return limits.non_negative_int(name, round(value * 1000), limits.MAX_MS)


@attrs.frozen(kw_only=True)
class TaskOptions:
    """A task's options. ``lease`` and ``timeout`` are seconds; ``backoff`` see ``Backoff``."""

    max_attempts: int = 1
    backoff: Backoff = attrs.field(default=None, converter=check_backoff)
    timeout: float | None = None
    lease: float = DEFAULT_LEASE
    priority: int = 0
    process: bool = False

    def __attrs_post_init__(self) -> None:
        # the caps the scripts enforce, checked now rather than when a job fails
        limits.positive_int("max_attempts", self.max_attempts, limits.MAX_ATTEMPTS)
        if self.timeout is not None:
            seconds("timeout", self.timeout, allow_zero=False, high=MAX_DELAY)
        seconds("lease", self.lease, allow_zero=False, high=MAX_DELAY)
        if self.lease < 0.003:
            raise InvalidArgument(f"lease must be at least 3 ms, not {self.lease!r}")
        limits.int_in("priority", self.priority, -limits.MAX_PRIORITY, limits.MAX_PRIORITY)

    @property
    def lease_ms(self) -> int:
        return max(3, round(self.lease * 1000))
