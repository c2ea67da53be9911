"""The reply table: every status code and error prefix a script answers, and its meaning.

Scripts refuse in two ways, both before their first write: a small negative integer
(``Code``), or an error reply whose first word names the refusal (``EMQSTALE``,
``EMQSTATE ...``). This module is the only place that knows either.
"""

from __future__ import annotations

import enum
from typing import Any

from ..errors import (
    ActiveJobs,
    DuplicateJob,
    EchoMQError,
    JobGone,
    JobLocked,
    NotActive,
    NotCancellable,
    NotDead,
    NotPaused,
    ScriptError,
    ServerError,
    StaleToken,
)

__all__ = ["Code", "ExtendResult", "translate", "check", "text", "as_int"]


class Code(enum.IntEnum):
    """Integer statuses shared by the scripts."""

    OK = 1
    ALREADY = 2  # idempotent repeat: e.g. complete again with the same token
    GONE = -1  # no row
    STALE = -2  # the token is not the row's attempts (batch replies only)
    NOT_ACTIVE = -3  # the id has left the active set


class ExtendResult(enum.StrEnum):
    """Per-id outcome of ``extend_locks``."""

    OK = "ok"
    GONE = "gone"
    STALE = "stale"
    NOT_ACTIVE = "not_active"


EXTEND_RESULTS = {
    Code.OK: ExtendResult.OK,
    Code.GONE: ExtendResult.GONE,
    Code.STALE: ExtendResult.STALE,
    Code.NOT_ACTIVE: ExtendResult.NOT_ACTIVE,
}

_CODE_ERRORS: dict[int, type[EchoMQError]] = {
    Code.GONE: JobGone,
    Code.STALE: StaleToken,
    Code.NOT_ACTIVE: NotActive,
}

# Error replies: the longest matching prefix wins.
_ERROR_PREFIXES: tuple[tuple[str, type[EchoMQError]], ...] = (
    ("EMQSTALE", StaleToken),
    ("EMQSTATE not paused", NotPaused),
    ("EMQSTATE active", ActiveJobs),
    ("EMQSTATE not dead", NotDead),
    ("EMQSTATE not cancellable", NotCancellable),
    ("EMQLOCKED", JobLocked),
    ("EMQDUP", DuplicateJob),
    ("EMQGONE", JobGone),
)


def translate(message: str) -> EchoMQError:
    """The typed error for a server error reply (ServerError when unknown)."""
    for prefix, cls in _ERROR_PREFIXES:
        if message.startswith(prefix):
            return cls(message)
    return ServerError(message)


def check(reply: Any, what: str) -> int:
    """Return an OK/ALREADY status; raise the typed error for a refusal code."""
    if not isinstance(reply, int):
        raise ScriptError(f"{what}: unexpected reply {reply!r}")
    if reply in (Code.OK, Code.ALREADY, 0):
        return reply
    cls = _CODE_ERRORS.get(reply)
    if cls is None:
        raise ScriptError(f"{what}: unknown status {reply}")
    raise cls(what)


def text(value: Any) -> str:
    """A bulk string reply as str (both drivers answer bytes)."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, str):
        return value
    raise ScriptError(f"expected a string reply, got {value!r}")


def as_int(value: Any) -> int:
    if isinstance(value, int):
        return value
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ScriptError(f"expected an integer reply, got {value!r}") from None
