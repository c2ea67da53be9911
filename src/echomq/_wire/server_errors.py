"""The server's own refusals that have a type of their own (the wire's reply table).

Rule 1: an error reply from Redis becomes :class:`~echomq.errors.ServerError`, except
credentials (``WRONGPASS``, ``NOAUTH``: :class:`~echomq.errors.AuthenticationError`) and ACL
permissions (``NOPERM``, and inside a script Redis 7.0's "The user executing the script
can't ...": :class:`~echomq.errors.PermissionDenied`, naming the command sent and what the
user lacks), which retrying cannot fix. The scripts' own refusals are not known here:
``replies.py`` maps them.
Rule 2 (the one place that says what is transient): a reply whose first word is in
:data:`TRANSIENT` says the command did not run and may be sent later. Both wires send it
again with backoff until ``connect_timeout`` (``connection.py``, ``cluster.py``; the sync
driver in ``scripts.evaluate_sync``), then raise :class:`~echomq.errors.Unavailable`
(``ClusterDown`` for ``CLUSTERDOWN``), which ``errors.TRANSIENT`` names for the loops
above (the worker's settle, claim, lease and recovery loops try again within their bounds).
"""

from __future__ import annotations

import re

from ..errors import AuthenticationError, ClusterDown, PermissionDenied, ServerError, Unavailable

__all__ = [
    "NON_LOCAL",
    "TRANSIENT",
    "first_word",
    "is_transient",
    "missing_permission",
    "permission_denied",
    "server_error",
]

#: A script refused mid-migration: it met a per-job key the node does not hold (moved
#: already, or not created yet). Every script reads each per-job key before its first write
#: (docs/lua.md, rule 1), so it stopped having written nothing.
NON_LOCAL = "ERR Script attempted to access a non local key"

#: First words of replies that mean "not run here, now; try later". ``NONLOCAL`` stands for
#: :data:`NON_LOCAL`; ``UNBLOCKED``: a blocked pop on a master that became a replica (it
#: popped nothing).
TRANSIENT = frozenset(
    {"LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "UNBLOCKED", "NONLOCAL"}
)


def first_word(message: str) -> str:
    """The reply's first word (``NONLOCAL`` for a script's "non local key" refusal)."""
    if message.startswith(NON_LOCAL):
        return "NONLOCAL"
    return message.split(" ", 1)[0]


def is_transient(message: str) -> bool:
    """Whether an error reply says the command was not run and may be sent again later."""
    return first_word(message) in TRANSIENT


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


# An ACL refusal: the server's own words (NOPERM ...), or a script's call refused (Redis
# 7.0 answers "ERR The user executing the script can't run this command or subcommand
# script: <sha>, on @user_script:<line>." without naming the command)
_SCRIPT_ACL = "The user executing the script can't"
_NAMED = re.compile(r"permissions to run the '([^']+)' command")


def missing_permission(message: str) -> str | None:
    """What an ACL refusal says the user lacks, in words; None: not an ACL refusal."""
    if not (message.startswith("NOPERM") or _SCRIPT_ACL in message or " NOPERM " in message):
        return None
    named = _NAMED.search(message)
    if named:
        return f"the command {named[1].upper()}"
    if "keys" in message:
        return "access to a key it names (the user's key patterns, ~emq:*)"
    if "channel" in message:
        return "access to a channel it names (the user's channel patterns, &emq:*)"
    if _SCRIPT_ACL in message:
        return "a command the script calls"
    return "a permission"


def permission_denied(
    message: str, command: str | None = None, calls: str | None = None
) -> PermissionDenied:
    """The :class:`~echomq.errors.PermissionDenied` for an ACL refusal of ``command``, in
    one line: what was sent, what the user lacks, where the rules are, the server's words
    (``calls``: the commands a script calls, named when the server does not say which)."""
    missing = missing_permission(message) or "a permission"
    named = f" (it calls {calls})" if calls and missing == "a command the script calls" else ""
    first = " ".join(message.split())  # one line
    return PermissionDenied(
        f"NOPERM: {command or 'a call'} refused: the ACL user lacks {missing}{named}; not "
        f'retried (docs/operations.md, "Redis ACLs"): {first}',
        command=command,
        missing=missing,
    )


def server_error(message: str, context: str = "", command: str | None = None) -> ServerError:
    """The error for a server's error reply: ``AuthenticationError`` for wrong or missing
    credentials, ``PermissionDenied`` for an ACL refusal, ``Unavailable`` (``ClusterDown``)
    for a transient refusal (:data:`TRANSIENT`), else ``ServerError``.

    ``context`` (e.g. ``"redis://host:6379/0: AUTH failed"``) prefixes the message;
    ``command`` (the command sent, when known) is named in a ``PermissionDenied``.
    """
    text = f"{context}: {message}" if context else message
    first = message.split(" ", 1)[0]
    if first == "NOAUTH" or "Protocol error: unauthenticated" in message:
        # A client that has not authenticated may not send a long command: the server
        # answers "Protocol error: unauthenticated multibulk length" (and closes).
        return AuthenticationError(f"NOAUTH: {_NOAUTH_HINT} ({text})")
    if first == "WRONGPASS" or message.startswith(_AUTH_REFUSED):
        return AuthenticationError(text)
    if missing_permission(message) is not None:
        return permission_denied(text, command)
    word = first_word(message)
    if word == "CLUSTERDOWN":
        return ClusterDown(text)
    if word in TRANSIENT:
        return Unavailable(text)
    return ServerError(text)
