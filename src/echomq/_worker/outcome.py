"""What a job's run came to: the :class:`Settlement` the worker records, and its builders.

Rule 1 (a job's failure is never the worker's): whatever leaves user code (any exception,
``SystemExit`` and ``KeyboardInterrupt`` included, alone or in an exception group), the
codec (a payload it cannot decode, a result it cannot encode) or a retry delay that
cannot be scheduled ends as that job's failure; only trio's ``Cancelled`` of a real
cancellation passes (:func:`failure_of` splits it off a group).
Rule 2 (the texts): ``last_error`` is ``Type: message``, at most :data:`MAX_ERROR_TEXT`
bytes; a reason added to it (``(not retried: ...)``) is kept whole. The traceback goes to
the worker's log and to the job's log list, at most one log line (head and tail kept). A
cut says where: ``... [truncated 12,345 chars]``.
Rule 3 (what each ending means): a failure is retried after the task's backoff, dead when
the backoff cannot answer a delay; ``Retry`` is a failure with its own delay;
``RateLimited`` is no failure: the job backs off to the schedule (``backoff_ms``);
``JobCancelled`` or a cancel request settles the job cancelled (its state ``cancelled``);
``ChildFailed`` (``job.wait_children()``) is dead at once, as a flow parent's; a timeout
is ``TimeoutError: ran longer than N s``; an undecodable payload or unencodable result is
dead at once (a retry cannot help).

An outcome is a :class:`Settlement`, the encoded result of a plain completion (bytes: the
common case, no object made for it), or None: not settled here (a lost lease, a fence, a
shutdown past grace: ``settle.py`` finishes it).
"""

from __future__ import annotations

import logging
import traceback
from datetime import timedelta

import attrs
import trio

from .._model.backoff import NoDelay, backoff_ms, delay_ms
from .._model.cancel import cancelled_result
from .._model.text import clip, error_text, safe_str
from ..errors import ChildFailed, JobCancelled, RateLimited, Retry, SerializationError
from ..jobs.rows import MAX_LOG_LINE
from .cancellation import Held, Stop
from .protocols import TaskSpec

__all__ = [
    "MAX_ERROR_TEXT",
    "REASON_ROOM",
    "Outcome",
    "Settlement",
    "cancelled",
    "failed",
    "failure_of",
    "fallback",
    "raised",
    "timed_out",
    "traceback_line",
    "undecodable",
    "with_reason",
]

log = logging.getLogger("echomq.worker")

MAX_ERROR_TEXT = 8 * 1024  # bytes of a job's last_error (and of its events' error field)
REASON_ROOM = 1024  # bytes of an error text kept for "(not retried: ...)"


@attrs.frozen(kw_only=True)
class Settlement:
    """How a job ends this attempt: ``complete`` (with a result) or ``fail``; or, with
    ``backoff_ms``, neither: it backs off (``RateLimited``), no failure counted.

    ``fallback``: this is already the dead-letter that replaced a refused settlement.
    """

    complete: bool
    result: bytes = b""
    error: str = ""
    retry_delay_ms: int = 0
    dead: bool = False
    cancelled: bool = False
    traceback: str | None = None
    fallback: bool = False
    backoff_ms: int | None = None  # RateLimited: back on the schedule, no failure counted


Outcome = Settlement | bytes | None


def with_reason(error: str, reason: str) -> str:
    """``error (reason)``, the whole at most MAX_ERROR_TEXT bytes, the reason kept."""
    note = clip(f" ({reason})", REASON_ROOM)
    return clip(error, MAX_ERROR_TEXT - len(note.encode())) + note


def failure_of(exc: BaseException) -> BaseException | None:
    """The part of ``exc`` that is the job's failure; None when it is only trio's Cancelled.

    A group is split: its Cancelled parts belong to trio (a cancellation is level-triggered:
    the next checkpoint of a still-cancelled scope raises it again), the rest is the job's.
    A group left with a single exception is that exception.
    """
    if isinstance(exc, trio.Cancelled):
        return None
    if not isinstance(exc, BaseExceptionGroup):
        return exc
    _, rest = exc.split(trio.Cancelled)
    while isinstance(rest, BaseExceptionGroup) and len(rest.exceptions) == 1:
        rest = rest.exceptions[0]
    return rest


def traceback_line(exc: BaseException) -> str:
    """The traceback as one log line: at most MAX_LOG_LINE bytes, head and tail kept."""
    try:
        text = "".join(traceback.format_exception(exc)).rstrip()
    except Exception:  # a traceback that cannot be formatted: its type then
        text = error_text(exc)
    return clip(text, MAX_LOG_LINE, tail=MAX_LOG_LINE // 2)


def failed(task: TaskSpec, failures: int, error: str, tb: str | None) -> Settlement:
    """A failure: retried after the task's backoff (``failures`` before this one), or dead
    when the backoff answers no delay."""
    try:
        delay = backoff_ms(task.options.backoff, failures + 1)
    except NoDelay as why:
        error = with_reason(error, f"not retried: {why}")
        return Settlement(complete=False, error=error, dead=True, traceback=tb)
    return Settlement(
        complete=False, error=clip(error, MAX_ERROR_TEXT), retry_delay_ms=delay, traceback=tb
    )


def timed_out(task: TaskSpec, failures: int) -> Settlement:
    error = f"TimeoutError: ran longer than {task.options.timeout:g} s"
    return failed(task, failures, error, None)


def _retry(task: TaskSpec, failures: int, ask: Retry) -> Settlement:
    error = f"Retry: {safe_str(ask.reason)}"
    try:
        if ask.delay is not None:
            delay = delay_ms(ask.delay)
        else:
            delay = backoff_ms(task.options.backoff, failures + 1)
    except NoDelay as why:
        return Settlement(
            complete=False, error=with_reason(error, f"not retried: {why}"), dead=True
        )
    return Settlement(complete=False, error=clip(error, MAX_ERROR_TEXT), retry_delay_ms=delay)


def _rate_limited(ask: RateLimited) -> Settlement:
    error = f"RateLimited: {safe_str(ask.reason)}"
    after = ask.retry_after
    seconds = after.total_seconds() if isinstance(after, timedelta) else after
    try:
        if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and seconds < 0:
            raise NoDelay(f"the delay {seconds!r} is negative")
        ms = delay_ms(seconds)
    except NoDelay as why:
        return Settlement(
            complete=False, error=with_reason(error, f"not retried: {why}"), dead=True
        )
    return Settlement(complete=False, error=clip(error, MAX_ERROR_TEXT), backoff_ms=max(1, ms))


def raised(
    task: TaskSpec,
    job_id: str,
    failures: int,
    held: Held,
    failure: BaseException,
    exc: BaseException,
    deadline: float | None,
) -> Settlement:
    """What ``failure`` (the job's part of ``exc``, what its handler raised) means."""
    if isinstance(failure, Retry):
        return _retry(task, failures, failure)
    if isinstance(failure, RateLimited):
        return _rate_limited(failure)
    if isinstance(failure, JobCancelled):
        reason = failure.reason if failure.reason is not None else held.cancel_token.reason
        return Settlement(complete=True, result=cancelled_result(reason), cancelled=True)
    if isinstance(failure, ChildFailed):  # as a flow parent's: dead, a retry cannot help
        return Settlement(
            complete=False, error=clip(error_text(failure), MAX_ERROR_TEXT), dead=True
        )
    if (
        isinstance(failure, trio.TooSlowError)
        and deadline is not None
        and trio.current_time() >= deadline
    ):
        return timed_out(task, failures)
    tb = traceback_line(exc)
    log.warning("job %s (%s) raised:\n%s", job_id, task.name, tb)
    return failed(task, failures, error_text(failure), tb)


def undecodable(job_id: str, exc: Exception, what: str) -> Settlement:
    """Dead at once: a payload that cannot be decoded, a result that cannot be encoded."""
    error = error_text(exc)
    if not isinstance(exc, SerializationError):  # a custom codec's bug: say where it hit
        error = with_reason(error, what)
    error = clip(error, MAX_ERROR_TEXT)
    log.warning("job %s: %s", job_id, error)
    return Settlement(complete=False, error=error, dead=True)


def cancelled(held: Held) -> Settlement | None:
    """A job whose scope was cancelled: settled cancelled (``cancelled:<reason>``) when a cancel
    request stopped it; None (not settled here) for a lost lease, a fence or a shutdown."""
    if held.stop is Stop.CANCEL:
        reason = held.cancel_token.reason
        return Settlement(complete=True, result=cancelled_result(reason), cancelled=True)
    return None


def fallback(s: Settlement, why: str) -> Settlement:
    """The dead-letter that replaces a settlement the server refused."""
    if s.complete:
        what = "the cancellation" if s.cancelled else "the result"
        error = clip(f"{what} could not be stored: {why}", MAX_ERROR_TEXT)
    else:
        error = with_reason(s.error, f"not retried: settling failed: {why}")
    return Settlement(complete=False, error=error, dead=True, fallback=True)
