"""The reply table: every status code and error prefix a script answers, and its meaning.

Scripts refuse in two ways, both before their first write: a small negative integer
(``Code``), or an error reply whose first word names the refusal (``EMQSTALE``,
``EMQSTATE ...``). This module is the only place that knows either. It also names the
server's own refusals that have a type of their own: credentials (``WRONGPASS``, ``NOAUTH``)
and ACL permissions (``NOPERM``); see :func:`server_error`.
"""

from __future__ import annotations

import enum
from typing import Any

from ..errors import (
    ActiveJobs,
    AuthenticationError,
    DuplicateJob,
    EchoMQError,
    InvalidArgument,
    JobGone,
    JobLocked,
    NotActive,
    NotCancellable,
    NotDead,
    NotPaused,
    PermissionDenied,
    ScriptError,
    ServerError,
    StaleToken,
)

__all__ = ["Code", "ExtendResult", "translate", "server_error", "check", "text", "as_int"]


class Code(enum.IntEnum):
    """Integer statuses shared by the scripts."""

    OK = 1
    ALREADY = 2  # idempotent repeat: e.g. complete again with the same token
    CANCEL = 3  # extended, and the row carries a cancel request (extend_locks only)
    GONE = -1  # no row
    STALE = -2  # the token is not the row's attempts (batch replies only)
    NOT_ACTIVE = -3  # the id has left the active set


class ExtendResult(enum.StrEnum):
    """Per-id outcome of ``extend_locks`` (and ``release``, which never answers ``cancel``).

    ``cancel``: the lease was extended like ``ok``, and the job carries a cancel request
    (``echomq.cancel.request``): its holder should stop it and complete it as cancelled.
    """

    OK = "ok"
    CANCEL = "cancel"
    GONE = "gone"
    STALE = "stale"
    NOT_ACTIVE = "not_active"


EXTEND_RESULTS = {
    Code.OK: ExtendResult.OK,
    Code.CANCEL: ExtendResult.CANCEL,
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
    ("EMQARG", InvalidArgument),  # a count over its cap reached a script (the verbs gate it)
)


def translate(message: str) -> EchoMQError:
    """The typed error for a server error reply (:func:`server_error` when no script's)."""
    for prefix, cls in _ERROR_PREFIXES:
        if message.startswith(prefix):
            return cls(message)
    return server_error(message)


# The server's own refusals with a type of their own. redis-py drops the first word of an
# error reply; the second column matches what it leaves.
_NOAUTH_HINT = (
    "the server requires a password and none was given: "
    "put it in the URL (redis://:PASSWORD@host, or redis://USER:PASSWORD@host)"
)


_AUTH_REFUSED = (
    "ERR AUTH",  # AUTH <password> called without any password configured
    "ERR invalid password",  # Redis < 6
    "ERR Client sent AUTH, but no password is set",  # Redis < 6
    "AUTH <password> called",  # as redis-py words the first
)


def server_error(message: str, context: str = "") -> ServerError:
    """The error for a server's error reply: ``AuthenticationError`` for wrong or missing
    credentials, ``PermissionDenied`` for an ACL refusal, else ``ServerError``.

    ``context`` (e.g. ``"redis://host:6379/0: AUTH failed"``) prefixes the message.
    """
    text = f"{context}: {message}" if context else message
    first = message.split(" ", 1)[0]
    if first == "NOAUTH" or "Protocol error: unauthenticated" in message:
        # A client that has not authenticated may not send a long command: the server
        # answers "Protocol error: unauthenticated multibulk length" (and closes).
        return AuthenticationError(f"NOAUTH: {_NOAUTH_HINT} ({text})")
    if first == "WRONGPASS" or message.startswith(_AUTH_REFUSED):
        return AuthenticationError(text)
    if first == "NOPERM":
        return PermissionDenied(text)
    return ServerError(text)


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
