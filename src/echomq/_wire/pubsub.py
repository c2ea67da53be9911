"""A pub/sub connection of its own: subscribe to channels, iterate messages.

Rule 1: a subscription survives a dropped socket: the connection is made again with
backoff and every channel and pattern is subscribed again. Messages published in between
are lost; events are fire-and-forget (at most once), as the seeds say.
Rule 2: ``subscribe`` returns once the server has confirmed every channel, so a message
published after it returns is received.
Rule 3: ``async for message in pubsub`` yields :class:`Message` values in arrival order. A
consumer that falls more than ``buffer`` messages behind loses the newest ones rather
than stalling the socket.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import attrs
import trio

from .._jitter import Backoff
from ..config import ConnectionConfig
from ..errors import ConnectionLost, TLSError
from .connection import TRANSPORT_ERRORS, Parser, ReplyError, new_parser, open_stream, pack
from .server_errors import server_error

__all__ = ["Message", "PubSub"]

_CONFIRMS = {b"subscribe": "channel", b"psubscribe": "pattern"}


@attrs.frozen
class Message:
    """One published message: its channel, its bytes, and the pattern that matched (if any)."""

    channel: str
    data: bytes
    pattern: str | None = None


class _Confirm:
    """Set when the server confirms a subscription (or refuses it with ``error``)."""

    __slots__ = ("error", "event")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.error: str | None = None


class PubSub:
    """Open with :func:`open_pubsub`. Not for commands: use a ``Connection`` for those."""

    def __init__(self, config: ConnectionConfig, *, buffer: int = 1024) -> None:
        self.config = config
        self._wanted: dict[str, set[str]] = {"channel": set(), "pattern": set()}
        self._stream: trio.abc.Stream | None = None
        self._send_lock = trio.Lock()  # one writer at a time; held across a handshake
        self._send, self._receive = trio.open_memory_channel[Message](buffer)
        self._confirm: dict[tuple[str, str], _Confirm] = {}
        self.reconnects = 0
        self.dropped = 0  # messages lost to a slow consumer

    @property
    def channels(self) -> frozenset[str]:
        return frozenset(self._wanted["channel"])

    async def subscribe(self, *channels: str) -> None:
        """Subscribe, and return once the server has confirmed every channel."""
        await self._add("channel", "SUBSCRIBE", channels)

    async def psubscribe(self, *patterns: str) -> None:
        """Subscribe to patterns, and return once the server has confirmed each."""
        await self._add("pattern", "PSUBSCRIBE", patterns)

    async def unsubscribe(self, *channels: str) -> None:
        await self._remove("channel", "UNSUBSCRIBE", channels)

    async def punsubscribe(self, *patterns: str) -> None:
        await self._remove("pattern", "PUNSUBSCRIBE", patterns)

    async def _add(self, kind: str, command: str, names: tuple[str, ...]) -> None:
        wanted = self._wanted[kind]
        new = sorted(set(names) - wanted)
        wanted.update(new)
        for name in new:
            self._confirm[kind, name] = _Confirm()
        # every name still unconfirmed, including one another task is subscribing
        waits = [c for n in names if (c := self._confirm.get((kind, n))) is not None]
        if new:
            await self._write(command, *new)
        for confirm in waits:
            await confirm.event.wait()
            if confirm.error is not None:
                wanted.difference_update(names)
                raise server_error(confirm.error, f"{command} refused")

    async def _remove(self, kind: str, command: str, names: tuple[str, ...]) -> None:
        wanted = self._wanted[kind]
        gone = sorted(set(names) & wanted)
        wanted.difference_update(gone)
        if gone:
            await self._write(command, *gone)

    async def _write(self, *args: str) -> None:
        async with self._send_lock:
            if self._stream is None:
                return  # not connected: the next handshake subscribes to everything wanted
            try:
                await self._stream.send_all(pack(args))
            except TRANSPORT_ERRORS:
                pass  # the reader notices and resubscribes everything

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._receive.__aiter__()

    async def receive(self) -> Message:
        """The next message (waits for one)."""
        return await self._receive.receive()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep the subscription alive until cancelled (started by :func:`open_pubsub`).

        The first connection must succeed (``ConnectionLost`` otherwise); later ones are
        retried with backoff for as long as it runs.
        """
        backoff = Backoff(0.02, 1.0)
        started = False
        while True:
            try:
                stream = await open_stream(self.config)
            except (*TRANSPORT_ERRORS, trio.TooSlowError, ConnectionLost, TLSError) as exc:
                if not started:
                    if isinstance(exc, TLSError):
                        raise
                    raise ConnectionLost(
                        f"cannot connect to {self.config.display}: {exc!r}"
                    ) from exc
                await backoff.sleep()
                continue
            try:
                parser = new_parser()
                async with self._send_lock:
                    await self._handshake(stream, parser)
                    self._stream = stream
                if started:
                    self.reconnects += 1
                else:
                    started = True
                    task_status.started()
                backoff.reset()
                await self._read(stream, parser)
            except TRANSPORT_ERRORS:
                if not started:
                    raise ConnectionLost(f"cannot connect to {self.config.display}") from None
            finally:
                self._stream = None
                with trio.CancelScope(shield=True):
                    await trio.aclose_forcefully(stream)

    async def _handshake(self, stream: trio.abc.Stream, parser: Parser) -> None:
        """AUTH (its reply read here: a refusal is fatal), then subscribe to everything."""
        await authenticate(stream, parser, self.config)
        commands = [
            pack((command, *sorted(self._wanted[kind])))
            for kind, command in (("channel", "SUBSCRIBE"), ("pattern", "PSUBSCRIBE"))
            if self._wanted[kind]
        ]
        if commands:
            await stream.send_all(b"".join(commands))

    async def _read(self, stream: trio.abc.Stream, parser: Parser) -> None:
        while True:
            while (reply := parser.gets()) is not False:
                self._dispatch(reply)
            data = await stream.receive_some(1 << 16)
            if not data:
                raise trio.BrokenResourceError("server closed the connection")
            parser.feed(data)

    def _dispatch(self, reply: Any) -> None:
        if isinstance(reply, ReplyError):  # e.g. NOPERM for a channel: fail the waiters
            for confirm in self._confirm.values():
                confirm.error = str(reply)
                confirm.event.set()
            self._confirm.clear()
            return
        if not isinstance(reply, list) or not reply:
            return
        kind = reply[0]
        if kind == b"message":
            msg = Message(reply[1].decode(), reply[2])
        elif kind == b"pmessage":
            msg = Message(reply[2].decode(), reply[3], pattern=reply[1].decode())
        else:
            confirmed = _CONFIRMS.get(kind)
            if confirmed is not None:
                name: str = reply[1].decode()
                waiting = self._confirm.pop((confirmed, name), None)
                if waiting is not None:
                    waiting.event.set()
            return
        try:
            self._send.send_nowait(msg)
        except trio.WouldBlock:
            self.dropped += 1  # a slow consumer loses events rather than stalling the reader


async def authenticate(stream: trio.abc.Stream, parser: Parser, config: ConnectionConfig) -> None:
    """Send AUTH when ``config`` has a password and read its reply (a refusal raises)."""
    if config.password is None:
        return
    user = (config.username,) if config.username else ()
    await stream.send_all(pack(("AUTH", *user, config.password)))
    while (reply := parser.gets()) is False:
        data = await stream.receive_some(4096)
        if not data:
            raise trio.BrokenResourceError("closed during AUTH")
        parser.feed(data)
    if isinstance(reply, ReplyError):
        raise server_error(str(reply), f"{config.display}: AUTH failed")
