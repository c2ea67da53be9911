"""When a repeatable job runs: an interval (``every``) or a cron expression in a time zone.

Rule 1: a schedule is checked when it is built (``Schedule.of``): a malformed cron
expression, an interval <= 0, an unknown time zone are :class:`~echomq.errors.InvalidArgument`
before any I/O.
Rule 2: times are epoch milliseconds on the server's clock: the scheduler reads the server
clock, and this module only does the arithmetic (a cron expression with a time zone cannot
be evaluated in Lua). A slot is an instant a run is due.
Rule 3: cron expressions are evaluated by ``cronsim`` (docs/repeat.md says why), with
Debian cron's rules on DST days: a run whose wall-clock time does not exist (spring forward)
runs at the first minute after the gap; a fixed-time run in the repeated hour (fall back)
runs once, in the first pass; ``*``-hour expressions run in both passes, as the clock says.
Every answer of :meth:`Schedule.after` is strictly later than its argument.
Rule 4: missed runs (docs/repeat.md): the runs due while no scheduler ran are coalesced into
one (the latest due slot); ``missed="once"`` enqueues it however late; ``missed="skip"``
enqueues it only when the scheduler kept up (no slot before it went unfired) and it is at
most ``grace`` late, else drops it. Either way the schedule goes on at the first slot after
now: there is never a burst of catch-up runs.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import zoneinfo
from typing import Literal

import attrs
from cronsim import CronSim, CronSimError

from ..errors import InvalidArgument
from . import caps as limits

__all__ = [
    "DEFAULT_GRACE_MS",
    "MISSED_POLICIES",
    "MissedPolicy",
    "Plan",
    "Schedule",
    "check_missed",
    "check_tz",
    "duration_ms",
]

MissedPolicy = Literal["once", "skip"]
MISSED_POLICIES: tuple[MissedPolicy, ...] = ("once", "skip")
DEFAULT_GRACE_MS = 60_000  # missed="skip": a run later than this is skipped
_WALK = 1000  # slots walked forward before jumping (a long downtime of a fine schedule)


def duration_ms(name: str, value: object) -> int:
    """``value`` (a ``timedelta`` or seconds) as whole milliseconds: >= 1 ms, <= 2^40 ms.

    Raises:
        InvalidArgument: not a duration, <= 0, below a millisecond, or over the cap.
    """
    if isinstance(value, dt.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise InvalidArgument(f"{name} must be a timedelta or seconds, not {value!r}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidArgument(f"{name} must be > 0, not {value!r}")
    # compared in seconds first: a huge finite value (1e308) has no millisecond int
    if seconds > limits.MAX_MS / 1000 or round(seconds * 1000) > limits.MAX_MS:
        raise InvalidArgument(f"{name} must be at most 2^40 ms (~34.8 years), not {value!r}")
    ms = round(seconds * 1000)
    if ms < 1:
        raise InvalidArgument(f"{name} must be at least 1 ms, not {value!r}")
    return ms


#: names a tz database may hold that are not IANA zones: their meaning is the machine's
#: (``localtime`` is its own zone, ``posixrules`` its POSIX-TZ default, ``Factory`` a
#: placeholder); ``posix/`` and ``right/`` are copies of the tree (``right/`` counts leap
#: seconds, which Python's clocks do not)
_NOT_IANA = frozenset({"localtime", "posixrules", "Factory"})
_NOT_IANA_PREFIXES = ("posix/", "right/")
#: an IANA name's characters: ``Europe/Berlin``, ``Etc/GMT+5``, ``America/Port-au-Prince``
_IANA_NAME = re.compile(r"[A-Za-z0-9_+-]+(?:/[A-Za-z0-9_+-]+)*")


def check_tz(name: object) -> zoneinfo.ZoneInfo:
    """The time zone named ``name``: an IANA name (``Europe/Berlin``, ``UTC``), which every
    machine reads the same. The rule: segments of ``[A-Za-z0-9_+-]`` joined by ``/``, found
    in the tz database, and not ``localtime``, ``posixrules``, ``Factory`` or a name under
    ``posix/`` or ``right/`` (their meaning, or their clock, is the machine's).

    Raises:
        InvalidArgument: not a str, not an IANA name, or no such zone in this machine's
            tz database.
    """
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"tz must be an IANA time zone name, not {name!r}")
    if name in _NOT_IANA or name.startswith(_NOT_IANA_PREFIXES):
        raise InvalidArgument(
            f"tz {name!r} is not an IANA time zone name: its meaning depends on the "
            "machine (give the zone itself: Europe/Berlin, UTC)"
        )
    unknown = f"unknown time zone {name!r} (an IANA name: Europe/Berlin)"
    if len(name) > 64 or _IANA_NAME.fullmatch(name) is None:
        raise InvalidArgument(unknown)
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidArgument(unknown) from None


def check_missed(value: object) -> MissedPolicy:
    if value == "once":
        return "once"
    if value == "skip":
        return "skip"
    raise InvalidArgument(f"missed must be 'once' or 'skip', not {value!r}")


def _check_cron(expr: object, tz: zoneinfo.ZoneInfo) -> str:
    if not isinstance(expr, str):
        raise InvalidArgument(f"cron must be a str, not {type(expr).__name__}")
    fields = expr.split()
    if len(fields) != 5:
        raise InvalidArgument(
            f"cron {expr!r} must have 5 fields (minute hour day-of-month month day-of-week)"
        )
    canonical = " ".join(fields)
    start = dt.datetime(2000, 1, 1, tzinfo=tz)
    try:
        next(CronSim(canonical, start))
    except CronSimError as exc:
        raise InvalidArgument(f"malformed cron {expr!r}: {exc}") from None
    except StopIteration:
        raise InvalidArgument(f"cron {expr!r} never fires") from None
    return canonical


@attrs.frozen(kw_only=True)
class Plan:
    """What the scheduler does with a due record.

    ``slot``: the run to enqueue (the latest due slot); ``fire``: False when the policy
    skips it; ``next_ms``: the first slot after now; ``coalesced``: due slots before
    ``slot`` that get no run of their own (0 when the scheduler kept up).
    """

    slot: int
    fire: bool
    next_ms: int
    coalesced: int


@attrs.frozen(kw_only=True)
class Schedule:
    """An interval (``every_ms``) or a cron expression (``cron``, in the zone ``tz``)."""

    every_ms: int | None = None
    cron: str | None = None
    tz: str = "UTC"

    @classmethod
    def of(cls, *, every: object = None, cron: object = None, tz: object = None) -> Schedule:
        """A checked schedule: exactly one of ``every`` (a timedelta or seconds) and
        ``cron`` (5 fields); ``tz`` (default UTC) only with ``cron``.

        Raises:
            InvalidArgument: both or neither, a bad interval, a malformed cron expression,
                an unknown time zone.
        """
        if (every is None) == (cron is None):
            raise InvalidArgument("give every= (an interval) or cron= (an expression), one")
        if every is not None:
            if tz is not None:
                raise InvalidArgument("tz applies to cron schedules, not to every=")
            return cls(every_ms=duration_ms("every", every))
        zone_name = "UTC" if tz is None else tz
        zone = check_tz(zone_name)
        return cls(cron=_check_cron(cron, zone), tz=zone.key)

    @property
    def zone(self) -> zoneinfo.ZoneInfo:
        return zoneinfo.ZoneInfo(self.tz)

    def describe(self) -> str:
        """``every 5s`` / ``cron */5 * * * * (Europe/Berlin)``."""
        if self.every_ms is not None:
            return f"every {_show_ms(self.every_ms)}"
        return f"cron {self.cron} ({self.tz})"

    def after(self, ms: int) -> int:
        """The first slot strictly after ``ms`` (an interval counts from ``ms``)."""
        if self.every_ms is not None:
            return ms + self.every_ms
        assert self.cron is not None
        start = dt.datetime.fromtimestamp(ms / 1000, self.zone)
        slots = CronSim(self.cron, start)
        while True:  # cronsim's DST fix-ups may answer a wall time already passed
            slot = round(next(slots).timestamp() * 1000)
            if slot > ms:
                return slot

    def _latest_at_or_before(self, ms: int) -> int:
        assert self.cron is not None
        start = dt.datetime.fromtimestamp((ms + 1) / 1000, self.zone)
        return round(next(CronSim(self.cron, start, reverse=True)).timestamp() * 1000)

    def upcoming(self, first: int, n: int) -> list[int]:
        """``first`` and the ``n - 1`` slots after it."""
        slots = [first]
        while len(slots) < n:
            slots.append(self.after(slots[-1]))
        return slots

    def plan(self, due: int, now: int, missed: MissedPolicy, grace_ms: int) -> Plan:
        """The run for a record whose next slot ``due`` is <= ``now`` (rule 4)."""
        if self.every_ms is not None:
            late = max(0, now - due) // self.every_ms
            slot = due + late * self.every_ms
            next_ms, coalesced = slot + self.every_ms, late
        else:
            slot, coalesced = due, 0
            next_ms = self.after(slot)
            while next_ms <= now and coalesced < _WALK:
                slot, next_ms, coalesced = next_ms, self.after(next_ms), coalesced + 1
            if next_ms <= now:  # a long downtime: jump to now (the count stays a floor)
                slot = max(slot, self._latest_at_or_before(now))
                next_ms = self.after(max(slot, now))
        fire = missed == "once" or (coalesced == 0 and now - slot <= grace_ms)
        return Plan(slot=slot, fire=fire, next_ms=next_ms, coalesced=coalesced)


def _show_ms(ms: int) -> str:
    parts: list[str] = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms >= size:
            parts.append(f"{ms // size}{unit}")
            ms %= size
    if ms or not parts:
        parts.append(f"{ms}ms")
    return "".join(parts)
