"""Retry delays: a task's ``backoff=`` option turned into seconds.

``backoff`` is a number (a fixed delay, in seconds) or a callable ``failures -> seconds``
where ``failures`` counts this failure too (1 after the first). The default doubles from
one second and stops growing at five minutes: 1, 2, 4, 8 ... 300.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import InvalidArgument

__all__ = ["Backoff", "DEFAULT_BACKOFF_CAP", "check_backoff", "default_backoff", "delay_for"]

Backoff = float | int | Callable[[int], float]

DEFAULT_BACKOFF_CAP = 300.0


def default_backoff(failures: int) -> float:
    """1 s, doubling with each failure, capped at five minutes."""
    return min(DEFAULT_BACKOFF_CAP, 2.0 ** max(0, min(failures - 1, 30)))


def check_backoff(backoff: Backoff | None) -> Backoff:
    """The backoff to use; a negative number or a non-callable raises InvalidArgument."""
    if backoff is None:
        return default_backoff
    if isinstance(backoff, bool):
        raise InvalidArgument("backoff must be seconds or a callable, not a bool")
    if isinstance(backoff, int | float):
        if not backoff >= 0:
            raise InvalidArgument(f"backoff must be >= 0 seconds, not {backoff!r}")
        return backoff
    if callable(backoff):
        return backoff
    raise InvalidArgument(f"backoff must be seconds or a callable, not {backoff!r}")


def delay_for(backoff: Backoff, failures: int) -> float:
    """Seconds to wait before the next attempt, after ``failures`` failures (>= 0)."""
    seconds = backoff(failures) if callable(backoff) else backoff
    return max(0.0, float(seconds))
