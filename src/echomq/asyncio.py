"""echomq from asyncio (FastAPI, Starlette, aiohttp, plain ``asyncio.run``).

The same ``Queue`` and tasks serve every kind of caller; the asyncio spelling is the
``a``-prefixed twin of each trio call (Django's convention for async twins)::

    handle = await send.adelay("a@b.c", subject="hi")      # trio: await send.delay(...)
    handle = await send.aapply(("a@b.c",), {}, delay=10)    # trio: await send.apply(...)
    value = await handle.aresult(timeout=30)                # trio: await handle.result(...)
    await handle.acancel("user asked")                      # trio: await handle.cancel(...)
    info = await handle.ainfo()                             # trio: await handle.info()

No ``open()`` is needed: the queue connects on first use, once per event loop, and
``await queue.aclose()`` (or ``async with queue.aopen():``, e.g. in a FastAPI lifespan)
closes that loop's connection. Every verb runs on asyncio too, with a connection from
:func:`connect`::

    async with echomq.asyncio.connect("redis://127.0.0.1:6379/0") as conn:
        await echomq.admin.pause(conn, "emails")
        stats = await echomq.admin.stats(conn, "emails")

Rule 1: the same verbs, call builders, scripts and reply readers as trio: the connection
is another driver of them (``_wire/drivers/aio.py``, redis.asyncio underneath), auto-pipelined on
one server as the trio wire is; a ``redis+cluster://`` URL uses redis.asyncio's cluster
client. Rule 2: ``aresult`` reads the job's row, then the queue's completions stream from
where the row was read (one blocking ``XREAD`` reader per queue and loop on a connection
of its own, shared by every waiting call; docs/results.md): it never polls and cannot
miss a result; past ``timeout`` it raises the builtin ``TimeoutError``.
Rule 3: a connection belongs to the loop that made it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from ._client.aio_results import AsyncioResultFeed
from ._wire.drivers.aio import AsyncioClusterConnection, AsyncioConnection, asyncio_connection
from .config import ConnectionConfig, resolve_url

__all__ = [
    "AsyncioClusterConnection",
    "AsyncioConnection",
    "AsyncioQueueClient",
    "AsyncioResultFeed",
    "connect",
]


@asynccontextmanager
async def connect(
    url: str | ConnectionConfig | None = None, **options: Any
) -> AsyncIterator[AsyncioConnection | AsyncioClusterConnection]:
    """An asyncio connection for the verbs (``echomq.jobs``, ``admin``, ``cancel``...);
    closed when the block exits. No I/O until the first command. ``url`` defaults to
    ``$ECHOMQ_URL``, else ``redis://127.0.0.1:6379/0``.

    ``options`` override fields of :class:`~echomq.config.ConnectionConfig`.

    Raises:
        InvalidArgument: a bad URL, or an ``ssl_context`` (use the ``ssl_*`` parameters).
    """
    if url is None:
        url = resolve_url()
    conn = asyncio_connection(url, **options)
    try:
        yield conn
    finally:
        await conn.aclose()


class AsyncioQueueClient:
    """What a ``Queue`` holds for one event loop: its connection and, once a result was
    awaited, the queue's stream reader. Made by the queue; no I/O until used."""

    def __init__(self, url: str | ConnectionConfig, queue: str) -> None:
        self.queue = queue
        self.connection = asyncio_connection(url)
        self._url = url
        self._results: AsyncioResultFeed | None = None

    @property
    def results(self) -> AsyncioResultFeed:
        """The queue's completions reader on this loop (reads from the first wait on)."""
        if self._results is None:
            self._results = AsyncioResultFeed(self._url, self.queue)
        return self._results

    async def aclose(self) -> None:
        """Stop the reader and close the connections."""
        if self._results is not None:
            await self._results.aclose()
        await self.connection.aclose()
