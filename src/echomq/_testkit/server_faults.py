"""Faults of a private redis-server (``echomq.testing.RedisServer``): crash and restart it,
take it away for a while, or freeze it.

What comes back after a crash depends on the server, not on the fault:

=======================  ==================================  ==============================
fault                    ``RedisServer()``                   ``RedisServer(appendonly=True)``
=======================  ==================================  ==============================
``restart_redis``        back at once, empty                 back at once, with every write
                                                             it acknowledged
``drop_redis`` block     gone for the block, back empty      gone for the block, back with
                                                             its data
``freeze_redis`` block   answers nothing for the block (SIGSTOP), then carries on: no loss
=======================  ==================================  ==============================

A crash is SIGKILL: a ``RedisServer(appendonly=True)`` writes its append-only file before
it replies (``appendfsync no``: never postponed), so a process crash loses no acknowledged
write (an operating-system crash is another matter). The
server comes back on the same port and directory; with ``tls=True`` the same CA signs it.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import trio

from .redis_server import RedisServer, RedisServerError

__all__ = ["drop_redis", "freeze_redis", "restart_redis"]


def _running(server: RedisServer) -> None:
    if server.process is None or server.process.poll() is not None:
        raise RedisServerError("the redis-server is not running (start() it first)")


async def restart_redis(server: RedisServer) -> None:
    """Crash the server (SIGKILL) and start it again; return once it answers PING.

    Raises:
        RedisServerError: it was not running, or did not come back.
    """
    _running(server)
    await trio.to_thread.run_sync(server.restart)


@asynccontextmanager
async def drop_redis(server: RedisServer) -> AsyncIterator[None]:
    """The server is gone (SIGKILL) for the block, and started again when it ends (also on
    an error or a cancellation); connections meanwhile are refused.

    Raises:
        RedisServerError: it was not running, or did not come back.
    """
    _running(server)
    await trio.to_thread.run_sync(server.kill)
    try:
        yield
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(server.restart)


@contextmanager
def freeze_redis(server: RedisServer) -> Iterator[None]:
    """The server process is stopped (SIGSTOP) for the block: connections stay open, it
    reads nothing and answers nothing (a hung server, or a silent network); SIGCONT at the
    end, and it answers what it was sent.

    Raises:
        RedisServerError: it was not running.
    """
    _running(server)
    assert server.process is not None
    server.process.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        server.process.send_signal(signal.SIGCONT)
