"""The operator buttons: one verb call per command, guarded by the token.

Rule 1: a command without the right token is refused before anything else happens
(compared in constant time); a refused command touches nothing.
Rule 2: the dashboard calls the public verbs (``echomq.admin``, ``echomq.jobs``,
``echomq.cancel``), looked up when the command runs, so it knows no script and no key.
A verb that is not installed answers a clear error instead of breaking the page.
Rule 3: commands (and ``logs`` reads) reach only the queues this dashboard shows.
"""

from __future__ import annotations

import hmac
import importlib
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from .._scripts.keyspace import check_id, check_queue
from .._wire.connection import Connection
from ..errors import EchoMQError
from .messages import CommandRequest

__all__ = ["CommandRefused", "VERBS", "not_shown", "run_command", "token_matches"]


class CommandRefused(Exception):
    """A command the dashboard will not run (bad token, verb not available)."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


#: action -> (module, function name); job actions take the job id as third argument.
VERBS: dict[str, tuple[str, str]] = {
    "pause": ("echomq.admin", "pause"),
    "resume": ("echomq.admin", "resume"),
    "drain": ("echomq.admin", "drain"),
    "reprocess": ("echomq.jobs", "reprocess_job"),
    "remove": ("echomq.jobs", "remove_job"),
    "cancel": ("echomq.cancel", "request"),
}


def token_matches(expected: str, given: str) -> bool:
    """Constant-time comparison; an empty token never matches."""
    return bool(given) and hmac.compare_digest(expected.encode(), given.encode())


def not_shown(queue: str) -> str:
    return f"queue {queue!r} is not one this dashboard shows"


def _verb(action: str) -> Callable[..., Awaitable[Any]]:
    module_name, name = VERBS[action]
    try:
        module = importlib.import_module(module_name)
        fn: Callable[..., Awaitable[Any]] = getattr(module, name)
    except (ImportError, AttributeError):
        raise CommandRefused(
            f"{module_name}.{name} is not available in this echomq", "unavailable"
        ) from None
    return fn


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


async def run_command(
    conn: Connection,
    request: CommandRequest,
    token: str,
    queues: Collection[str] | None = None,
) -> Any:
    """Run one operator command; answer a JSON-able value.

    ``queues``: the queues this dashboard shows; a command on another is refused.

    Raises:
        CommandRefused: wrong token, bad queue name or job id, a queue this dashboard
            does not show, verb missing.
        EchoMQError: the verb refused (e.g. ``NotDead``); nothing changed.
    """
    if not token_matches(token, request.token):
        raise CommandRefused("a valid token is needed for operator commands", "unauthorized")
    try:
        queue = check_queue(request.queue)
        job = check_id(request.job) if request.job is not None else None
    except EchoMQError as exc:
        raise CommandRefused(str(exc), "invalid") from None
    if queues is not None and queue not in queues:
        raise CommandRefused(not_shown(queue), "unknown_queue")
    verb = _verb(request.action)
    if job is None:
        return _plain(await verb(conn, queue))
    if request.action == "cancel":
        return _plain(await verb(conn, queue, job, "cancelled from the dashboard"))
    return _plain(await verb(conn, queue, job))
