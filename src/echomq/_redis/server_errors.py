"""The server's own refusals that have a type of their own (the wire's reply table).

Rule 1: an error reply from Redis becomes :class:`~echomq.errors.ServerError`, except
credentials (``WRONGPASS``, ``NOAUTH``: :class:`~echomq.errors.AuthenticationError`) and ACL
permissions (``NOPERM``: :class:`~echomq.errors.PermissionDenied`), which retrying cannot
fix. The scripts' own refusals are not known here: ``replies.py`` maps them.
"""

from __future__ import annotations

from ..errors import AuthenticationError, PermissionDenied, ServerError

__all__ = ["server_error"]

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
