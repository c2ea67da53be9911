"""The reply table: every status code and error prefix a script answers, and its meaning.

Scripts refuse in two ways, both before their first write: a small negative integer
(``Code``: no row, stale token, not active; the same codes in single-job and batch
replies), or an error reply whose first word names the refusal (``EMQSTATE ...``,
``EMQDUP``...). This module is the only place that knows either (:func:`check_status`,
:func:`translate`). The server's own refusals with a type of their own (credentials, ACL)
are the wire's (``server_errors.py``; :func:`server_error` is re-exported here).
"""

from __future__ import annotations

import enum
from typing import Any

from .._wire.server_errors import server_error
from ..errors import (
    ActiveJobs,
    DuplicateJob,
    EchoMQError,
    FlowStateError,
    HasOpenChildren,
    InvalidArgument,
    JobGone,
    JobLocked,
    NotActive,
    NotCancellable,
    NotDead,
    NotPaused,
    QueueNotFound,
    RepeatFormatError,
    ScriptError,
    StaleToken,
)

__all__ = [
    "Code",
    "ExtendResult",
    "FlowNotice",
    "translate",
    "server_error",
    "check_status",
    "text",
    "as_int",
]


class Code(enum.IntEnum):
    """Integer statuses shared by the scripts."""

    OK = 1
    ALREADY = 2  # idempotent repeat: e.g. complete again with the same token
    CANCEL = 3  # extended, and the row carries a cancel request (extend_locks only)
    GONE = -1  # no row
    STALE = -2  # the token is not the row's attempts (single-job and batch replies alike)
    NOT_ACTIVE = -3  # the id has left the active set


class FlowNotice(enum.IntEnum):
    """``flow_notify``'s answer (a child's outcome relayed to its parent on another queue)."""

    NO_PARENT = 0  # no such parent (gone), not a flow parent, or not its child: nothing written
    TOLD = 1
    ALREADY = 2  # this child's outcome was recorded before (a re-delivered entry)


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
    ("EMQSTATE not paused", NotPaused),
    ("EMQSTATE active", ActiveJobs),
    ("EMQSTATE not dead", NotDead),
    ("EMQSTATE not cancellable", NotCancellable),
    ("EMQSTATE has open children", HasOpenChildren),
    ("EMQSTATE parent", FlowStateError),
    ("EMQLOCKED", JobLocked),
    ("EMQDUP", DuplicateJob),
    ("EMQGONE", JobGone),
    ("EMQFORMAT", RepeatFormatError),
    ("EMQARG", InvalidArgument),  # a count over its cap reached a script (the verbs gate it)
)


_NO_QUEUE = "EMQNOQUEUE "  # a verb that needs the queue found no meta hash (its name follows)


def translate(message: str) -> EchoMQError:
    """The typed error for a server error reply (:func:`server_error` when no script's)."""
    if message.startswith(_NO_QUEUE):
        return QueueNotFound(message[len(_NO_QUEUE) :])
    for prefix, cls in _ERROR_PREFIXES:
        if message.startswith(prefix):
            return cls(message)
    return server_error(message)


def check_status(reply: Any, what: str) -> int:
    """Return an OK/ALREADY status; raise the typed error for a refusal code.

    Raises:
        JobGone, StaleToken, NotActive: the script refused (``Code``).
        ScriptError: not a status the scripts answer.
    """
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
