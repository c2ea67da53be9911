"""How long finished jobs, their completions entries and their logs are kept (docs/results.md).

Rule 1: retention is by time; the counts are a memory guard. A finished job's row (and its
logs) gets a TTL when it finishes: ``keep_result`` for a completed (or cancelled) job,
``keep_dead`` for a dead one, from the job's own value (set at enqueue, from the task or
the apply) or else the queue's. The completions stream is trimmed to ``completions_keep``
by time (``MINID ~``) and to ``completions_max`` entries (``MAXLEN ~``). Past
``max_completed`` / ``max_dead`` rows, the rows closest to their end are deleted early,
and counted (``QueueStats.capped``: the guard was hit, a worker logs it).
Rule 2: a queue's settings live in its meta hash (``admin.set_retention``); an unset one is
its default. The settings and their defaults are written once, in the Lua
(``_scripts/lua/include/retention.lua``, ``RETENTION_DEFAULTS``, which the finishing scripts,
``add_log`` and ``set_retention`` read), and read here at import; which of them are times
(seconds in the API) is this module's (``_TIMES``).
Rule 3: the API speaks seconds (a float) for times, ints for counts and a bool for
``keep_payload``; the scripts speak ms, counts and 1 / 0. ``0`` as a keep means "not
kept": the row goes when the job finishes (a waiting ``result()`` still reads the
completions entry). ``keep_payload=False``: a completed (or cancelled) row is kept without
its payload (docs/results.md, "The finished row").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ..errors import InvalidArgument
from . import caps as limits
from .caps import include_text, lua_table

__all__ = [
    "METRICS_KEEP_MINUTES",
    "Retention",
    "keep_ms",
]

DAY = 86_400.0
METRICS_KEEP_MINUTES = limits.MAX_MINUTES  # per-minute counters kept 12 h (TTL 12 h + 2 min)

# setting -> its default as the scripts hold it (ms or a count), in the Lua's order
_DEFAULTS: dict[str, int] = lua_table(include_text("retention"), "RETENTION_DEFAULTS")
_TIMES = frozenset({"keep_result", "keep_dead", "completions_keep"})  # seconds in the API
_FLAGS = frozenset({"keep_payload"})  # a bool in the API, 1 / 0 in the scripts


def keep_ms(name: str, value: object) -> int:
    """A keep time in seconds (``>= 0``, finite, <= MAX_MS) as integer ms."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise InvalidArgument(f"{name} must be a number of seconds, not {value!r}")
    if value < 0 or value * 1000 > limits.MAX_MS:
        raise InvalidArgument(
            f"{name} must be in [0, {limits.MAX_MS // 1000}] seconds, not {value!r}"
        )
    return round(value * 1000)


def _check(name: str, value: object) -> int:
    if name in _TIMES:
        return keep_ms(name, value)
    if name in _FLAGS:
        if not isinstance(value, bool):
            raise InvalidArgument(f"{name} must be True or False, not {value!r}")
        return int(value)
    low = 0 if name == "completions_max" else 1
    return limits.int_in(name, value, low, limits.MAX_SETTING)


@attrs.frozen(kw_only=True)
class Retention:
    """A queue's retention settings, as answered by ``admin.retention`` (defaults filled).

    Times in seconds: ``keep_result`` (completed and cancelled rows), ``keep_dead`` (dead
    rows), ``completions_keep`` (stream entries). Counts, the memory guard:
    ``completions_max`` entries, ``max_completed`` / ``max_dead`` rows, ``max_log_lines``
    per job (when ``add_log`` is given no ``keep``). ``keep_payload``: whether a completed
    or cancelled row keeps its payload (``True``). Each default is the scripts' own
    (``include/retention.lua``; ``Retention()`` holds them). ``explicit`` names the settings
    the queue sets (the rest are defaults).
    """

    keep_result: float = _DEFAULTS["keep_result"] / 1000
    keep_dead: float = _DEFAULTS["keep_dead"] / 1000
    completions_keep: float = _DEFAULTS["completions_keep"] / 1000
    completions_max: int = _DEFAULTS["completions_max"]
    max_completed: int = _DEFAULTS["max_completed"]
    max_dead: int = _DEFAULTS["max_dead"]
    max_log_lines: int = _DEFAULTS["max_log_lines"]
    keep_payload: bool = bool(_DEFAULTS["keep_payload"])
    explicit: frozenset[str] = frozenset()

    @staticmethod
    def names() -> tuple[str, ...]:
        return tuple(_DEFAULTS)

    @staticmethod
    def defaults_ms() -> Mapping[str, int]:
        """Each setting's default as the scripts hold it (ms or a count)."""
        return dict(_DEFAULTS)

    @staticmethod
    def meta_args(settings: Mapping[str, Any]) -> list[str]:
        """``set_retention`` argv: name, value (ms or count; ``None`` -> '' = the default).

        Raises:
            InvalidArgument: an unknown name or a bad value (before any I/O).
        """
        if not settings:
            raise InvalidArgument(f"name at least one setting: {', '.join(_DEFAULTS)}")
        argv: list[str] = []
        for name, value in settings.items():
            if name not in _DEFAULTS:
                raise InvalidArgument(
                    f"unknown retention setting {name!r}; known: {', '.join(_DEFAULTS)}"
                )
            argv += [name, "" if value is None else str(_check(name, value))]
        return argv

    @classmethod
    def from_meta(cls, fields: Mapping[str, int | None]) -> Retention:
        """From the meta fields as stored (ms / counts; None = not set)."""
        values: dict[str, Any] = {}
        for name, raw in fields.items():
            if raw is None or name not in _DEFAULTS:
                continue
            if name in _TIMES:
                values[name] = raw / 1000
            elif name in _FLAGS:
                values[name] = raw != 0
            else:
                values[name] = raw
        return cls(**values, explicit=frozenset(values))


if set(_DEFAULTS) != {f.name for f in attrs.fields(Retention)} - {"explicit"} or not (
    (_TIMES | _FLAGS) <= set(_DEFAULTS)
):
    raise RuntimeError("include/retention.lua's RETENTION_DEFAULTS and Retention's fields differ")
