"""A nursery for background helpers that enclose a caller's block.

``connect``, ``open_pubsub``, ``open_event_feed`` and ``Queue.open`` run helper tasks
(a socket's reader and writer, a subscription) in a nursery around the caller's
``async with`` block. Trio wraps whatever leaves a nursery in an ExceptionGroup; an error
raised by the caller's own block should leave as itself, so that ``except StaleToken:``
around the block works. Errors of the helpers themselves stay grouped: they are bugs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

__all__ = ["open_service_nursery"]


@asynccontextmanager
async def open_service_nursery() -> AsyncIterator[trio.Nursery]:
    """A nursery whose helpers are cancelled when the block ends; the block's error is unwrapped."""
    body_error: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            try:
                yield nursery
            except BaseException as exc:
                body_error = exc
                raise
            finally:
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        if body_error is not None and list(group.exceptions) == [body_error]:
            raise body_error from body_error.__cause__
        raise
