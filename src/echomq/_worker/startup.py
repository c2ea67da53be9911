"""Waiting for Redis at worker start: retry with backoff until it answers, or stop.

Rule 1: a worker started before its Redis (a fleet booting, a container ordering race)
waits: one connection attempt (connect, AUTH, PING), then a pause that doubles from
``WAIT_MIN`` to ``WAIT_MAX`` with jitter (``_jitter.Backoff``: a fleet does not retry in
step), and one log line per failed attempt: ``waiting for redis at <url> (attempt N): <reason>``.
Rule 2: only what may pass by itself is waited for: nothing listening, a dropped socket,
a server still loading its data, a cluster whose slots are not all served yet
(``ConnectionLost``, ``Unavailable``: ``errors.TRANSIENT``). Wrong or missing credentials,
an ACL refusal, a TLS certificate nobody trusts or a TLS setting whose file is missing or
bad (``AuthenticationError``, ``PermissionDenied``, ``TLSError``) raise at once: retrying
cannot fix them and a worker that looks alive but never works hides the mistake
(docs/wire.md).
Rule 3: a stop asked while waiting ends the wait at once (``None``: nothing was opened).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from .._jitter import Backoff
from .._wire.dial import probe
from ..config import parse_url
from ..errors import TRANSIENT, ConnectionLost

__all__ = ["WAIT_MAX", "WAIT_MIN", "reason", "wait_for_redis"]

log = logging.getLogger("echomq.worker")

WAIT_MIN = 0.2  # seconds before the second attempt
WAIT_MAX = 10.0  # the longest pause between two attempts

T = TypeVar("T")


def reason(exc: BaseException) -> str:
    """Why a connection failed, in a few words (the innermost OS error when there is one)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause.strerror and not isinstance(cause, ConnectionLost):
            # trio words it "Error connecting to ('127.0.0.1', 6379): Connection refused"
            return str(cause.strerror).rsplit(": ", 1)[-1].lower()
        if isinstance(cause, BaseExceptionGroup) and cause.exceptions:
            cause = cause.exceptions[0]
            continue
        cause = cause.__cause__ or cause.__context__
    return str(exc)


async def wait_for_redis(url: str, stop: trio.Event, then: Callable[[], Awaitable[T]]) -> T | None:
    """Probe ``url`` until it answers, then run ``then()`` (a failure there with
    ``ConnectionLost``, Redis gone again, goes back to waiting); answer its value, or
    ``None`` once ``stop`` is set.

    Raises:
        AuthenticationError, PermissionDenied, TLSError, ServerError: not transient.
    """
    display = parse_url(url).display
    attempt = 0
    backoff = Backoff(WAIT_MIN, WAIT_MAX)
    while not stop.is_set():
        attempt += 1
        try:
            answered, answer = await _unless_stopped(stop, url, then)
        except TRANSIENT as exc:
            log.warning("waiting for redis at %s (attempt %d): %s", display, attempt, reason(exc))
        else:
            if not answered:
                break
            if attempt > 1:
                log.info("redis at %s answered (attempt %d)", display, attempt)
            return answer
        with trio.move_on_after(backoff.next()):
            await stop.wait()
    return None


async def _unless_stopped(
    stop: trio.Event, url: str, then: Callable[[], Awaitable[T]]
) -> tuple[bool, T | None]:
    """One attempt (probe, then ``then()``), cut short by ``stop``: (answered, value)."""
    found: list[T] = []
    failed: list[Exception] = []
    async with trio.open_nursery() as nursery:

        async def attempt() -> None:
            try:
                await probe(url)
                found.append(await then())
            except Exception as exc:  # raised below as itself, not in a group
                failed.append(exc)
            nursery.cancel_scope.cancel()

        async def watch() -> None:
            await stop.wait()
            nursery.cancel_scope.cancel()

        nursery.start_soon(attempt)
        nursery.start_soon(watch)
    if failed:
        raise failed[0]
    return (True, found[0]) if found else (False, None)
