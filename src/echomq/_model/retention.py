"""How long finished jobs, their completions entries and their logs are kept (docs/results.md).

Rule 1: retention is by time; the counts are a memory guard. A finished job's row (and its
logs) gets a TTL when it finishes: ``keep_result`` for a completed (or cancelled) job,
``keep_dead`` for a dead one, from the job's own value (set at enqueue, from the task or
the apply) or else the queue's. The completions stream is trimmed to ``completions_keep``
by time (``MINID ~``) and to ``completions_max`` entries (``MAXLEN ~``). Past
``max_completed`` / ``max_dead`` rows, the rows closest to their end are deleted early,
and counted (``QueueStats.capped``: the guard was hit, a worker logs it).
Rule 2: a queue's settings live in its meta hash (``admin.set_retention``); an unset one is
the default here, which ``include/finished.lua`` (``FINISH_DEFAULTS``) and ``add_log.lua``
(``DEFAULT_LOG_LINES``) hold too: tests/model/test_retention.py keeps them equal.
Rule 3: the API speaks seconds (a float) for times and ints for counts; the scripts speak
ms. ``0`` as a keep means "not kept": the row goes when the job finishes (a waiting
``result()`` still reads the completions entry).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ..errors import InvalidArgument
from . import caps as limits

__all__ = [
    "METRICS_KEEP_MINUTES",
    "Retention",
    "keep_ms",
]

DAY = 86_400.0
METRICS_KEEP_MINUTES = limits.MAX_MINUTES  # per-minute counters kept 12 h (TTL 12 h + 2 min)
MAX_COUNT_SETTING = 2**40  # any count setting (a sane bound, exact in a double)

# setting -> (kind, default); "ms" settings are seconds in the API
_SETTINGS: dict[str, tuple[str, int]] = {
    "keep_result": ("ms", 86_400_000),
    "keep_dead": ("ms", 7 * 86_400_000),
    "completions_keep": ("ms", 86_400_000),
    "completions_max": ("count", 1_000_000),
    "max_completed": ("count", 1_000_000),
    "max_dead": ("count", 1_000_000),
    "max_log_lines": ("count", 1_000),
}


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
    kind, _ = _SETTINGS[name]
    if kind == "ms":
        return keep_ms(name, value)
    low = 0 if name == "completions_max" else 1
    return limits.int_in(name, value, low, MAX_COUNT_SETTING)


@attrs.frozen(kw_only=True)
class Retention:
    """A queue's retention settings, as answered by ``admin.retention`` (defaults filled).

    Times in seconds: ``keep_result`` (completed and cancelled rows, 24 h), ``keep_dead``
    (dead rows, 7 days), ``completions_keep`` (stream entries, 24 h). Counts, the memory
    guard: ``completions_max`` entries (1,000,000), ``max_completed`` / ``max_dead`` rows
    (1,000,000 each), ``max_log_lines`` per job (1,000, when ``add_log`` is given no
    ``keep``). ``explicit`` names the settings the queue sets (the rest are defaults).
    """

    keep_result: float = _SETTINGS["keep_result"][1] / 1000
    keep_dead: float = _SETTINGS["keep_dead"][1] / 1000
    completions_keep: float = _SETTINGS["completions_keep"][1] / 1000
    completions_max: int = _SETTINGS["completions_max"][1]
    max_completed: int = _SETTINGS["max_completed"][1]
    max_dead: int = _SETTINGS["max_dead"][1]
    max_log_lines: int = _SETTINGS["max_log_lines"][1]
    explicit: frozenset[str] = frozenset()

    @staticmethod
    def names() -> tuple[str, ...]:
        return tuple(_SETTINGS)

    @staticmethod
    def defaults_ms() -> Mapping[str, int]:
        """Each setting's default as the scripts hold it (ms or a count)."""
        return {name: default for name, (_, default) in _SETTINGS.items()}

    @staticmethod
    def meta_args(settings: Mapping[str, Any]) -> list[str]:
        """``set_retention`` argv: name, value (ms or count; ``None`` -> '' = the default).

        Raises:
            InvalidArgument: an unknown name or a bad value (before any I/O).
        """
        if not settings:
            raise InvalidArgument(f"name at least one setting: {', '.join(_SETTINGS)}")
        argv: list[str] = []
        for name, value in settings.items():
            if name not in _SETTINGS:
                raise InvalidArgument(
                    f"unknown retention setting {name!r}; known: {', '.join(_SETTINGS)}"
                )
            argv += [name, "" if value is None else str(_check(name, value))]
        return argv

    @classmethod
    def from_meta(cls, fields: Mapping[str, int | None]) -> Retention:
        """From the meta fields as stored (ms / counts; None = not set)."""
        values: dict[str, Any] = {}
        for name, raw in fields.items():
            if raw is None or name not in _SETTINGS:
                continue
            values[name] = raw / 1000 if _SETTINGS[name][0] == "ms" else raw
        return cls(**values, explicit=frozenset(values))
