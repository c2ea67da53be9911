"""A pub/sub connection of its own: subscribe to channels, iterate messages.

Rule 1: a subscription survives a dropped socket: the connection is made again with
backoff and every channel is subscribed again. Messages published in between are lost;
events are fire-and-forget (at most once), as the seeds say.
Rule 2: ``async for message in pubsub`` yields :class:`Message` values in arrival order.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import hiredis
import trio

from ..config import ConnectionConfig, parse_url
from ..errors import ConnectionLost, ServerError
from .connection import ReplyError, open_stream

__all__ = ["Message", "PubSub", "open_pubsub"]

_TRANSPORT_ERRORS = (
    OSError,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    hiredis.ProtocolError,
)


@attrs.frozen
class Message:
    channel: str
    data: bytes
    pattern: str | None = None


class PubSub:
    """Open with :func:`open_pubsub`. Not for commands: use a ``Connection`` for those."""

    def __init__(self, config: ConnectionConfig) -> None:
        self.config = config
        self._channels: set[str] = set()
        self._patterns: set[str] = set()
        self._stream: trio.abc.Stream | None = None
        self._send, self._receive = trio.open_memory_channel[Message](1024)
        self._ready = trio.Event()
        self._confirm: dict[str, trio.Event] = {}
        self.reconnects = 0

    async def subscribe(self, *channels: str) -> None:
        """Subscribe, and return once the server has confirmed every channel."""
        new = set(channels) - self._channels
        self._channels |= new
        waits = [self._confirm.setdefault(c, trio.Event()) for c in new]
        if new and self._stream is not None:
            await self._send_command("SUBSCRIBE", *sorted(new))
        for event in waits:
            await event.wait()

    async def unsubscribe(self, *channels: str) -> None:
        gone = set(channels) & self._channels
        self._channels -= gone
        if gone and self._stream is not None:
            await self._send_command("UNSUBSCRIBE", *sorted(gone))

    async def psubscribe(self, *patterns: str) -> None:
        """Subscribe to patterns, and return once the server has confirmed each."""
        new = set(patterns) - self._patterns
        self._patterns |= new
        waits = [self._confirm.setdefault(p, trio.Event()) for p in new]
        if new and self._stream is not None:
            await self._send_command("PSUBSCRIBE", *sorted(new))
        for event in waits:
            await event.wait()

    async def _send_command(self, *args: str) -> None:
        assert self._stream is not None
        try:
            await self._stream.send_all(hiredis.pack_command(args))
        except _TRANSPORT_ERRORS:
            pass  # the reader notices and resubscribes everything

    async def wait_ready(self) -> None:
        """Wait until the first connection is made and its subscriptions are sent."""
        await self._ready.wait()

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._receive.__aiter__()

    async def receive(self) -> Message:
        return await self._receive.receive()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep the subscription alive until cancelled (started by :func:`open_pubsub`)."""
        delay = 0.02
        started = False
        while True:
            try:
                stream = await open_stream(self.config)
            except (*_TRANSPORT_ERRORS, trio.TooSlowError):
                if not started:
                    raise ConnectionLost(f"cannot connect to {self.config.display}") from None
                await trio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            try:
                await self._handshake(stream)
                self._stream = stream
                if started:
                    self.reconnects += 1
                delay = 0.02
                self._ready.set()
                if not started:
                    started = True
                    task_status.started()
                await self._read(stream)
            except _TRANSPORT_ERRORS:
                pass
            finally:
                self._stream = None
                with trio.CancelScope(shield=True):
                    await stream.aclose()

    async def _handshake(self, stream: trio.abc.Stream) -> None:
        commands: list[tuple[str, ...]] = []
        if self.config.password is not None:
            user = (self.config.username,) if self.config.username else ()
            commands.append(("AUTH", *user, self.config.password))
        if self._channels:
            commands.append(("SUBSCRIBE", *sorted(self._channels)))
        if self._patterns:
            commands.append(("PSUBSCRIBE", *sorted(self._patterns)))
        if not commands:
            return
        await stream.send_all(b"".join(hiredis.pack_command(c) for c in commands))
        if self.config.password is not None:
            # AUTH answers first; an error there is fatal, not transient
            parser = hiredis.Reader(replyError=ReplyError)
            self._pending_parser = parser
            while (reply := parser.gets()) is False:
                data = await stream.receive_some(4096)
                if not data:
                    raise trio.BrokenResourceError("closed during AUTH")
                parser.feed(data)
            if isinstance(reply, ReplyError):
                raise ServerError(str(reply))

    async def _read(self, stream: trio.abc.Stream) -> None:
        parser: Any = getattr(self, "_pending_parser", None) or hiredis.Reader(
            replyError=ReplyError
        )
        self._pending_parser = None
        while True:
            while (reply := parser.gets()) is not False:
                self._dispatch(reply)
            data = await stream.receive_some(1 << 16)
            if not data:
                raise trio.BrokenResourceError("server closed the connection")
            parser.feed(data)

    def _dispatch(self, reply: Any) -> None:
        if not isinstance(reply, list) or not reply:
            return
        kind = reply[0]
        if kind == b"message":
            msg = Message(reply[1].decode(), reply[2])
        elif kind == b"pmessage":
            msg = Message(reply[2].decode(), reply[3], pattern=reply[1].decode())
        else:
            if kind in (b"subscribe", b"psubscribe"):
                event = self._confirm.pop(reply[1].decode(), None)
                if event is not None:
                    event.set()
            return
        try:
            self._send.send_nowait(msg)
        except trio.WouldBlock:
            pass  # a slow consumer loses events rather than stalling the reader (at most once)


@asynccontextmanager
async def open_pubsub(url: str | ConnectionConfig, *channels: str) -> AsyncIterator[PubSub]:
    """A pub/sub connection subscribed to ``channels``; kept alive until the block exits."""
    pubsub = PubSub(parse_url(url))
    pubsub._channels.update(channels)
    async with trio.open_nursery() as nursery:
        await nursery.start(pubsub.run)
        try:
            yield pubsub
        finally:
            nursery.cancel_scope.cancel()
