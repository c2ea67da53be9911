"""The caps every layer agrees on, and the integer gates that enforce them.

Rule 1: ``bool`` is not an int here (``True`` is not a lease), and neither is ``1.5`` or
``"10"``; bad values raise :class:`~echomq.errors.InvalidArgument` (a ``ValueError``).
Rule 2: every cap is written once, in the Lua (``_scripts/lua/include/caps.lua``, with why
each is what it is), and read here at import: every bound keeps the scripts' arithmetic
exact, and each capped script checks its own cap again (docs/lua.md, rule 8).
Rule 3: ``_model`` imports nothing of ``_scripts``: the Lua is read as package data of
``echomq`` (:func:`include_text`), and :func:`lua_constants` / :func:`lua_table` are the one
reader of the numbers the Lua and Python share (the scripts' loader reads the layout
versions with it too; ``retention.py`` the retention defaults).
"""

from __future__ import annotations

import re
from importlib import resources

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
    "MAX_SETTING",
    "MAX_SWEEP",
    "include_text",
    "int_in",
    "lua_constants",
    "lua_table",
    "non_negative_int",
    "positive_int",
]

_CONSTANT = re.compile(r"^local (\w+) = (\d+)[ \t]*(?:--.*)?$", re.MULTILINE)
_ENTRY = re.compile(r"^[ \t]*(\w+) = (\d+),?[ \t]*(?:--.*)?$", re.MULTILINE)


def include_text(name: str) -> str:
    """The text of ``_scripts/lua/include/<name>.lua`` (package data: nothing imported)."""
    path = resources.files("echomq").joinpath("_scripts", "lua", "include", f"{name}.lua")
    return path.read_text(encoding="utf-8")


def lua_constants(text: str) -> dict[str, int]:
    """Every ``local NAME = <digits>`` line of a Lua text (a trailing comment allowed)."""
    return {m[1]: int(m[2]) for m in _CONSTANT.finditer(text)}


def lua_table(text: str, name: str) -> dict[str, int]:
    """The table ``local <name> = { key = <digits>, ... }`` of a Lua text, one entry a line,
    in order.

    Raises:
        RuntimeError: no such table, or a line of it that is not ``key = <digits>``.
    """
    match = re.search(rf"^local {name} = \{{\n(.*?)^\}}$", text, re.MULTILINE | re.DOTALL)
    if match is None:
        raise RuntimeError(f"no table {name} in the Lua")
    lines = [line for line in match[1].splitlines() if line.strip()]
    entries = {m[1]: int(m[2]) for m in _ENTRY.finditer(match[1])}
    if len(entries) != len(lines):
        raise RuntimeError(f"{name}: every line must be `key = <digits>,`")
    return entries


_CAPS = lua_constants(include_text("caps"))


def _cap(name: str) -> int:
    value = _CAPS.get(name)
    if value is None:
        raise RuntimeError(f"_scripts/lua/include/caps.lua does not set {name}")
    return value


MAX_PRIORITY = _cap("MAX_PRIORITY")  # |priority| * 2^40 + seq: an exact double score
MAX_MS = _cap("MAX_MS")  # 2^40 ms: a lease or delay; now + MAX_MS stays exact
MAX_ATTEMPTS = _cap("MAX_ATTEMPTS")  # handler failures a job may have
MAX_LIMIT = _cap("MAX_LIMIT")  # a group's concurrency, a rate limit's jobs per period
MAX_SETTING = _cap("MAX_SETTING")  # a retention count setting
MAX_COUNT = _cap("MAX_COUNT")  # jobs per claim
MAX_BATCH = _cap("MAX_BATCH")  # expired leases per reap / stalled sweep
MAX_ENQUEUE = _cap("MAX_ENQUEUE")  # jobs per enqueue_many call
MAX_FLOW_PAGE = _cap("MAX_FLOW_PAGE")  # a flow parent's children per flow_results call
MAX_FLOW = _cap("MAX_FLOW")  # nodes (and held parents released) per add_flow call
MAX_HELD = _cap("MAX_HELD")  # held jobs per extend_locks / release / complete_many call
MAX_BUDGET = _cap("MAX_BUDGET")  # jobs (or leftover keys) per drain / obliterate step
MAX_REPEAT_PAGE = _cap("MAX_REPEAT_PAGE")  # repeat records per repeat_due / repeat_list
MAX_SWEEP = _cap("MAX_SWEEP")  # index and stream entries per retention sweep call
MAX_MINUTES = _cap("MAX_MINUTES")  # minutes of per-minute counters one stats call reads
MAX_BEAT_FIELDS = _cap("MAX_BEAT_FIELDS")  # field pairs of one worker heartbeat record


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
