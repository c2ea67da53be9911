"""Retry delays: a task's ``backoff=`` option and ``Retry(delay=)`` turned into milliseconds.

``backoff`` is a number (a fixed delay, in seconds) or a callable ``failures -> seconds``
where ``failures`` counts this failure too (1 after the first). The default doubles from
one second and stops growing at five minutes: 1, 2, 4, 8 ... 300.

Rule 1: a delay is a real number of seconds, at most :data:`MAX_DELAY` (the scripts' cap:
``now + delay`` must stay exact in a double score); a negative one means "now". A fixed
``backoff=`` is checked against that at registration.
Rule 2: a delay that breaks rule 1 at run time (``Retry(delay=inf)``, a backoff callable
that raises or answers NaN) cannot be scheduled: :class:`NoDelay` says why, and the worker
dead-letters the job with that reason instead of retrying it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable

from ..errors import InvalidArgument
from .caps import MAX_MS
from .text import error_text

__all__ = [
    "Backoff",
    "DEFAULT_BACKOFF_CAP",
    "MAX_DELAY",
    "NoDelay",
    "backoff_ms",
    "check_backoff",
    "default_backoff",
    "delay_ms",
]

Backoff = float | int | Callable[[int], float]

DEFAULT_BACKOFF_CAP = 300.0
MAX_DELAY = MAX_MS / 1000  # seconds (~34.8 years): the longest delay, lease or timeout


class NoDelay(ValueError):
    """A retry delay that cannot be scheduled; the message says why."""


def default_backoff(failures: int) -> float:
    """1 s, doubling with each failure, capped at five minutes."""
    return min(DEFAULT_BACKOFF_CAP, 2.0 ** max(0, min(failures - 1, 30)))


def _show(value: object) -> str:
    try:
        text = repr(value)
    except Exception:  # a broken __repr__, an int too long to print
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 64 else text[:60] + "...>"


def _problem(seconds: object) -> str | None:
    """Why ``seconds`` is not a schedulable delay (None: it is)."""
    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real):
        return f"{_show(seconds)} is not a number of seconds"
    try:
        value = float(seconds)
    except Exception:  # a huge int (OverflowError), an odd Real
        value = math.inf
    if math.isnan(value):
        return f"{_show(seconds)} is not a number of seconds"
    if math.isinf(value):
        return f"{_show(seconds)} is not a finite number of seconds"
    if value > MAX_DELAY:
        return f"{_show(seconds)} s is past the cap of {MAX_DELAY:.0f} s"
    return None


def check_backoff(backoff: Backoff | None) -> Backoff:
    """The backoff to use; a bad number or a non-callable raises InvalidArgument."""
    if backoff is None:
        return default_backoff
    if isinstance(backoff, bool):
        raise InvalidArgument("backoff must be seconds or a callable, not a bool")
    if isinstance(backoff, int | float):
        if not backoff >= 0:
            raise InvalidArgument(f"backoff must be >= 0 seconds, not {backoff!r}")
        problem = _problem(backoff)
        if problem is not None:
            raise InvalidArgument(f"backoff: {problem}")
        return backoff
    if callable(backoff):
        return backoff
    raise InvalidArgument(f"backoff must be seconds or a callable, not {backoff!r}")


def delay_ms(seconds: object) -> int:
    """A delay in seconds as whole milliseconds (a negative one is 0).

    Raises:
        NoDelay: not a real number, NaN, or past :data:`MAX_DELAY` (inf included).
    """
    problem = _problem(seconds)
    if problem is not None:
        raise NoDelay(f"the delay {problem}")
    return max(0, round(float(seconds) * 1000))  # type: ignore[arg-type]


def backoff_ms(backoff: Backoff, failures: int) -> int:
    """Milliseconds to wait before the next attempt, after ``failures`` failures.

    Raises:
        NoDelay: the callable raised, or answered something :func:`delay_ms` refuses.
    """
    if not callable(backoff):
        return delay_ms(backoff)
    try:
        seconds = backoff(failures)
    except Exception as exc:  # user code: its error is the job's reason
        raise NoDelay(f"backoff raised {error_text(exc, 512)}") from exc
    problem = _problem(seconds)
    if problem is not None:
        raise NoDelay(f"backoff({failures}): {problem}")
    return max(0, round(float(seconds) * 1000))
