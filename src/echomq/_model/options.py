"""Options as values: a task's (:class:`TaskOptions`) and one enqueue's
(:class:`EnqueueOptions`). Each is the one place its options are declared: a new option is
a new field here (with its check), and the API's keywords reach it unchanged
(``@queue.task(**fields)``, ``task.apply(args, kwargs, **fields)``).

Rule 1: the API speaks float seconds; the verbs speak integer milliseconds. The one
conversion is :func:`to_ms`, and every seconds value is gated by :func:`seconds` first
(a finite number, within the scripts' cap :data:`~echomq._model.backoff.MAX_DELAY`).
Rule 2: an option is checked when its value object is built (at ``@queue.task``, at
``apply``), against the same caps the scripts enforce, so a bad option fails at import or
before any I/O, never when a job fails.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import attrs

from ..errors import InvalidArgument
from . import caps as limits
from .backoff import MAX_DELAY, Backoff, check_backoff
from .job import DedupMode, NewJob, check_dedup_mode
from .names import check_dedup_key, check_group, check_id
from .retention import keep_ms
from .schedule import MissedPolicy, Schedule, check_missed, duration_ms

__all__ = [
    "DEFAULT_LEASE",
    "EnqueueOptions",
    "GroupChoice",
    "TaskOptions",
    "Expires",
    "build_options",
    "expires_fields",
    "resolve_group",
    "seconds",
    "to_ms",
]

#: a group's name, or a callable of the job's arguments that answers one (or None)
GroupChoice = str | Callable[..., object] | None

#: a job's deadline (docs/runtime.md "Expiry"): a timedelta or seconds after the enqueue,
#: or an aware datetime
Expires = dt.timedelta | float | dt.datetime | None
MAX_EPOCH_MS = 2**53  # an absolute deadline stays an exact double in the scripts

OptionsT = TypeVar("OptionsT", "TaskOptions", "EnqueueOptions")

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


def expires_fields(value: object) -> dict[str, int]:
    """An ``expires=`` option as :class:`NewJob`'s fields: ``{"expires_ms": ms}`` (a
    timedelta or seconds, > 0, counted from the enqueue on the server's clock),
    ``{"expires_at_ms": ms}`` (an aware datetime, epoch ms; one already past expires the
    job at its first claim) or ``{}`` (None).

    Raises:
        InvalidArgument: a naive datetime, a duration <= 0 or over 2^40 ms, another type.
    """
    if value is None:
        return {}
    if isinstance(value, dt.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise InvalidArgument(
                f"expires must be an aware datetime (with a tzinfo), not the naive {value!r}"
            )
        try:
            epoch_ms = round(value.timestamp() * 1000)
        except (ValueError, OverflowError, OSError) as exc:
            raise InvalidArgument(f"expires {value!r} is out of range: {exc}") from None
        if not 0 <= epoch_ms <= MAX_EPOCH_MS:
            raise InvalidArgument(f"expires {value!r} is out of range")
        return {"expires_at_ms": epoch_ms}
    if not isinstance(value, dt.timedelta | int | float) or isinstance(value, bool):
        raise InvalidArgument(
            f"expires must be a timedelta, seconds or an aware datetime, not {value!r}"
        )
    return {"expires_ms": duration_ms("expires", value)}


def _check_group_choice(value: object) -> None:
    if value is not None and not callable(value):
        check_group(value)


def _check_group_concurrency(value: object) -> None:
    if value is not None:
        limits.positive_int("group_concurrency", value, limits.MAX_LIMIT)


def resolve_group(
    choice: GroupChoice, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None
) -> str | None:
    """The group a job goes to: ``choice`` itself, or what it answers when called with the
    job's arguments (an int is taken as its decimal text; None: no group).

    Raises:
        InvalidKey: not a valid group name (before any I/O).
        InvalidArgument: the callable raised (chained).
    """
    if callable(choice):
        try:
            picked = choice(*args, **(kwargs or {}))
        except Exception as exc:
            raise InvalidArgument(f"the group callable {choice!r} raised {exc!r}") from exc
    else:
        picked = choice
    if picked is None:
        return None
    if isinstance(picked, int) and not isinstance(picked, bool):
        picked = str(picked)
    return check_group(picked)


@attrs.frozen(kw_only=True)
class TaskOptions:
    """A task's options. ``lease``, ``timeout`` and ``soft_timeout`` are seconds;
    ``backoff`` see ``Backoff``.

    ``timeout`` is the hard stop (the attempt fails; a thread is abandoned, a process
    child killed); ``soft_timeout`` raises ``SoftTimeLimit`` inside the job first (it may
    clean up): it must be below ``timeout`` when both are given. ``keep_result`` /
    ``keep_dead``: seconds a finished job's row is kept (completed or cancelled / dead);
    None: the queue's (24 h / 7 days unless set, docs/results.md).
    ``group`` a group's name or a callable of the job's arguments that picks one
    (docs/lanes.md); ``group_concurrency`` the group's limit when it has none yet.

    ``cron`` (with ``tz``) or ``every`` (a timedelta or seconds) make the task repeatable:
    every worker of its queue registers it at start under the task's name, and the
    scheduler enqueues one run per slot, with no arguments (docs/repeat.md); ``missed``
    says what a run due during a downtime does (``"once"``: runs late, once; ``"skip"``).

    ``expires``: a deadline for each job of the task (a timedelta or seconds after its
    enqueue, or an aware datetime): a job not started by then is never run, it ends
    ``expired`` (docs/runtime.md "Expiry"). A repeatable's runs each expire that long
    after their own slot (a datetime is refused there).
    """

    max_attempts: int = 1
    backoff: Backoff = attrs.field(default=None, converter=check_backoff)
    timeout: float | None = None
    soft_timeout: float | None = None
    lease: float = DEFAULT_LEASE
    priority: int = 0
    process: bool = False
    keep_result: float | None = None
    keep_dead: float | None = None
    cron: str | None = None
    every: dt.timedelta | float | None = None
    tz: str | None = None
    missed: MissedPolicy = "once"
    group: GroupChoice = None
    group_concurrency: int | None = None
    expires: Expires = None

    def __attrs_post_init__(self) -> None:
        # the caps the scripts enforce, checked now rather than when a job fails
        limits.positive_int("max_attempts", self.max_attempts, limits.MAX_ATTEMPTS)
        if self.timeout is not None:
            seconds("timeout", self.timeout, allow_zero=False, high=MAX_DELAY)
        if self.soft_timeout is not None:
            seconds("soft_timeout", self.soft_timeout, allow_zero=False, high=MAX_DELAY)
            if self.timeout is not None and self.soft_timeout >= self.timeout:
                raise InvalidArgument(
                    f"soft_timeout ({self.soft_timeout:g} s) must be below timeout "
                    f"({self.timeout:g} s): the soft limit warns before the hard stop"
                )
        seconds("lease", self.lease, allow_zero=False, high=MAX_DELAY)
        if self.lease < 0.003:
            raise InvalidArgument(f"lease must be at least 3 ms, not {self.lease!r}")
        limits.int_in("priority", self.priority, -limits.MAX_PRIORITY, limits.MAX_PRIORITY)
        _check_keeps(self.keep_result, self.keep_dead)
        if self.cron is not None or self.every is not None or self.tz is not None:
            self.schedule()  # checked now: a bad cron fails at import, not at the worker
        check_missed(self.missed)
        _check_group_choice(self.group)
        _check_group_concurrency(self.group_concurrency)
        expires_fields(self.expires)
        if isinstance(self.expires, dt.datetime) and self.schedule() is not None:
            raise InvalidArgument(
                "a repeatable's expires is a timedelta or seconds after each run's slot, "
                "not a datetime"
            )

    @property
    def lease_ms(self) -> int:
        return max(3, round(self.lease * 1000))

    def schedule(self) -> Schedule | None:
        """The task's repeat schedule (None: not repeatable).

        Raises:
            InvalidArgument: a malformed cron, an interval <= 0, an unknown tz, or both.
        """
        if self.cron is None and self.every is None:
            if self.tz is not None:
                raise InvalidArgument("tz applies to a cron= task")
            return None
        return Schedule.of(every=self.every, cron=self.cron, tz=self.tz)


@attrs.frozen(kw_only=True)
class EnqueueOptions:
    """One enqueue's options: ``task.apply(args, kwargs, delay=10)`` builds one, or pass
    ``options=EnqueueOptions(...)``. None means "the task's" (``priority``,
    ``max_attempts``) or "none" (``delay``, ``at``, ``job_id``).

    Attributes:
        delay: seconds from now before the job may run.
        at: a datetime (naive means local time) or epoch seconds; converted to a delay on
            this machine's clock when the job is built. Not with ``delay``.
        priority: higher runs first (-4095..4095).
        job_id: an id of your own (1..128 of ``[A-Za-z0-9._~-]``); an existing job with it
            is answered instead of a new one (``handle.deduplicated``).
        max_attempts: handler failures allowed (1..1,000,000).
        keep_result: seconds the job's row (its result) is kept once it completed or was
            cancelled (0: not kept; a waiting ``result()`` still gets it); default the task's,
            else the queue's (24 h).
        keep_dead: seconds the row is kept once dead; default the task's, else the queue's
            (7 days).
        dedup: a dedup key (the id rule): while a job enqueued with it holds it, an enqueue
            with the same key answers that job (``handle.deduplicated``) and writes
            nothing. Needs ``dedup_for``, except in mode ``until_finished``.
        dedup_for: how long the key is held (a timedelta or seconds, > 0): from the
            enqueue; removing the job releases it early (docs/repeat.md, "Dedup windows").
        dedup_mode: ``"throttle"`` (the default: the key is held for ``dedup_for``, whatever
            becomes of the job), ``"until_finished"`` (held until the job completes, dies
            or is cancelled or removed; ``dedup_for``, when given, bounds it too) or
            ``"debounce"`` (a second enqueue while the holder still waits replaces the
            holder's arguments, restarts its delay, and extends the window).
        group: the job's group (its lane: fair turns between groups, per-group limits;
            docs/lanes.md): a name, or a callable of the job's arguments that picks one.
        group_concurrency: the group's concurrency limit, set when the group has none
            yet (``admin.set_group_concurrency`` changes it at run time).
        expires: the job's deadline: a timedelta or seconds after the enqueue (on the
            server's clock), or an aware datetime; not started by then, the job is never
            run and ends ``expired`` (docs/runtime.md "Expiry"); default the task's.

    Raises:
        InvalidArgument, InvalidKey: a bad value, when built (before any I/O).
    """

    delay: float | None = None
    at: dt.datetime | float | None = None
    priority: int | None = None
    job_id: str | None = None
    max_attempts: int | None = None
    keep_result: float | None = None
    keep_dead: float | None = None
    dedup: str | None = None
    dedup_for: dt.timedelta | float | None = None
    dedup_mode: DedupMode | None = None
    group: GroupChoice = None
    group_concurrency: int | None = None
    expires: Expires = None

    def __attrs_post_init__(self) -> None:
        _check_keeps(self.keep_result, self.keep_dead)
        expires_fields(self.expires)
        mode = check_dedup_mode(self.dedup_mode)
        if self.dedup_mode is not None and self.dedup is None:
            raise InvalidArgument("dedup_mode needs a dedup key")
        if self.dedup is not None and self.dedup_for is None and mode != "until_finished":
            raise InvalidArgument("give dedup (a key) and dedup_for (its window) together")
        if self.dedup is None and self.dedup_for is not None:
            raise InvalidArgument("dedup_for needs a dedup key")
        if self.dedup is not None:
            check_dedup_key(self.dedup)
        if self.dedup_for is not None:
            duration_ms("dedup_for", self.dedup_for)
        if self.delay is not None and self.at is not None:
            raise InvalidArgument("give delay or at, not both")
        if self.delay is not None:
            seconds("delay", self.delay, high=MAX_DELAY)
        if self.at is not None:
            _at_epoch(self.at)  # a datetime or epoch seconds this machine can convert
        if self.priority is not None:
            limits.int_in("priority", self.priority, -limits.MAX_PRIORITY, limits.MAX_PRIORITY)
        if self.job_id is not None:
            check_id(self.job_id)
        if self.max_attempts is not None:
            limits.positive_int("max_attempts", self.max_attempts, limits.MAX_ATTEMPTS)
        _check_group_choice(self.group)
        _check_group_concurrency(self.group_concurrency)

    def delay_seconds(self) -> float:
        """Seconds from now until the job is due (``at`` read on this machine's clock)."""
        if self.at is None:
            return 0.0 if self.delay is None else float(self.delay)
        return max(0.0, _at_epoch(self.at) - time.time())

    def new_job(
        self,
        payload: bytes,
        task: TaskOptions,
        name: str | None = None,
        *,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> NewJob:
        """The job to enqueue: ``payload`` with these options over the task's defaults;
        ``name`` is the task's (stored on the row, carried by the completions entry); a
        group callable is called with ``args`` and ``kwargs``.

        Raises:
            InvalidKey, InvalidArgument: a bad group, or ``group_concurrency`` without one.
        """
        choice = self.group if self.group is not None else task.group
        due_now = self.delay is None and self.at is None
        cacheable = due_now and not callable(choice)
        if cacheable:  # the same options for the same task: the same fields (bulk enqueues)
            built = _BUILT.get((id(self), id(task), name))
            if built is not None and built[0] is self and built[1] is task:
                return NewJob(payload=payload, **built[2])
        keep_result = task.keep_result if self.keep_result is None else self.keep_result
        keep_dead = task.keep_dead if self.keep_dead is None else self.keep_dead
        group = resolve_group(choice, args, kwargs)
        concurrency = (
            self.group_concurrency if self.group_concurrency is not None else task.group_concurrency
        )
        if group is None and self.group_concurrency is not None:
            raise InvalidArgument("group_concurrency needs a group")
        fields: dict[str, Any] = dict(
            job_id=self.job_id,
            delay_ms=0 if due_now else to_ms("delay", self.delay_seconds()),
            priority=task.priority if self.priority is None else self.priority,
            max_attempts=task.max_attempts if self.max_attempts is None else self.max_attempts,
            task=name,
            keep_result_ms=None if keep_result is None else keep_ms("keep_result", keep_result),
            keep_dead_ms=None if keep_dead is None else keep_ms("keep_dead", keep_dead),
            dedup=self.dedup,
            dedup_ms=0 if self.dedup_for is None else duration_ms("dedup_for", self.dedup_for),
            dedup_mode=check_dedup_mode(self.dedup_mode),
            group=group,
            group_concurrency=concurrency if group is not None else None,
            **expires_fields(self.expires if self.expires is not None else task.expires),
        )
        if cacheable:
            if len(_BUILT) >= _BUILT_MAX:
                _BUILT.clear()
            # only the fields off NewJob's defaults: fewer keywords, a quicker NewJob
            lean = {k: value for k, value in fields.items() if not _is_default(k, value)}
            _BUILT[(id(self), id(task), name)] = (self, task, lean)
        return NewJob(payload=payload, **fields)


def _at_epoch(at: dt.datetime | float) -> float:
    """``at`` as epoch seconds (a naive datetime is local time), at most :data:`MAX_DELAY`
    seconds from now (past times are "now").

    Raises:
        InvalidArgument: not a datetime or a finite number, a datetime this machine cannot
            place on its clock (year 1 in local time, say), or too far ahead.
    """
    if isinstance(at, dt.datetime):
        try:
            target = at.timestamp()
        except (ValueError, OverflowError, OSError) as exc:
            raise InvalidArgument(f"at {at!r} is out of range: {exc}") from None
    else:
        target = seconds("at", at)
    if target - time.time() > MAX_DELAY:
        raise InvalidArgument(f"at must be at most {MAX_DELAY:.0f} seconds from now, not {at!r}")
    return target


def _check_keeps(keep_result: object, keep_dead: object) -> None:
    for name, value in (("keep_result", keep_result), ("keep_dead", keep_dead)):
        if value is not None:
            keep_ms(name, value)


def build_options(
    cls: type[OptionsT], options: OptionsT | None, fields: Mapping[str, Any]
) -> OptionsT:
    """``options`` (or the defaults) with ``fields`` replacing some of them.

    Raises:
        InvalidArgument: a name that is not a field of ``cls``, a bad value, or ``options``
            of another type.
    """
    if options is not None and not isinstance(options, cls):
        raise InvalidArgument(f"options must be {cls.__name__}, not {options!r}")
    if not fields:  # the common call (``task.delay(...)``): nothing to check again
        return options if options is not None else _defaults(cls)
    names = _FIELDS.get(cls) or _FIELDS.setdefault(cls, {f.name for f in attrs.fields(cls)})
    unknown = sorted(set(fields) - names)
    if unknown:
        raise InvalidArgument(
            f"unknown option(s) {', '.join(unknown)}; {cls.__name__} has {', '.join(sorted(names))}"
        )
    return attrs.evolve(options if options is not None else _defaults(cls), **fields)


_FIELDS: dict[type[Any], set[str]] = {}
_NEW_JOB_DEFAULTS = {f.name: f.default for f in attrs.fields(NewJob) if f.name != "payload"}


def _is_default(name: str, value: object) -> bool:
    """Whether ``value`` is NewJob's default for ``name`` (of the same type: 1 is not True)."""
    default = _NEW_JOB_DEFAULTS[name]
    return type(value) is type(default) and value == default


# EnqueueOptions.new_job's fields per (options, task options, task name), by identity:
# both options are frozen, and the entry keeps them, so an id is not reused while it lives.
# A bulk enqueue of one task with one set of options computes them once. Not for delays
# (read from the clock) nor a group callable (called per job).
_BUILT: dict[tuple[int, int, str | None], tuple[EnqueueOptions, TaskOptions, dict[str, Any]]] = {}
_BUILT_MAX = 256
_DEFAULTS: dict[type[Any], Any] = {}


def _defaults(cls: type[OptionsT]) -> OptionsT:
    """One shared ``cls()`` (the values are frozen: built and checked once, not per call)."""
    found = _DEFAULTS.get(cls)
    if found is None:
        found = _DEFAULTS[cls] = cls()
    return found
