"""The trio wire: one RESP2 connection that multiplexes every concurrent caller.

Rule 1 (auto-pipelining): callers never wait for each other's round trips. Each call
packs its command (hiredis) and queues it; one writer task sends everything queued since
its last write in a single ``send_all``; one reader task parses replies (hiredis) and
hands each to the caller whose command was next in line. Replies come back in order.
Rule 2 (no replay): when the socket drops, every command queued or in flight fails with
:class:`~echomq.errors.ConnectionLost`. Nothing is re-sent: a script may have run.
The next call reconnects, with backoff, within ``connect_timeout``.
Rule 3 (cancellation): a call cancelled before its bytes were written is never sent; a
call cancelled after is run by the server and its reply dropped.
Rule 4: a server that answers ``LOADING``, ``BUSY``, ``MASTERDOWN`` or ``TRYAGAIN`` did not
run the command: it is sent again after a backoff, within ``connect_timeout``.

The wire knows nothing about jobs.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import hiredis
import outcome
import trio

from ..config import ConnectionConfig, parse_url
from ..errors import ConnectionLost, ServerError

__all__ = ["Connection", "connect", "open_stream", "ReplyError", "Arg"]

Arg = str | bytes | int | float

_TRANSIENT = (b"LOADING", b"BUSY", b"MASTERDOWN", b"TRYAGAIN")
_TRANSPORT_ERRORS = (
    OSError,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    hiredis.ProtocolError,
)


class ReplyError(Exception):
    """An error reply as hiredis hands it over (also inside arrays); see ``ServerError``."""


async def open_stream(config: ConnectionConfig) -> trio.abc.Stream:
    """Open the byte stream (TCP, unix socket, or TLS over TCP) for ``config``."""
    with trio.fail_after(config.connect_timeout):
        if config.unix_path:
            return await trio.open_unix_socket(config.unix_path)
        stream: trio.abc.Stream = await trio.open_tcp_stream(config.host, config.port)
        if config.tls:
            tls = trio.SSLStream(stream, config.make_ssl_context(), server_hostname=config.host)
            await tls.do_handshake()
            stream = tls
        return stream


class _Waiter:
    __slots__ = ("abandoned", "task")

    def __init__(self) -> None:
        self.task = trio.lowlevel.current_task()
        self.abandoned = False


class _Session:
    """One socket: a reader task and a writer task, and the callers between them."""

    def __init__(self, stream: trio.abc.Stream, label: str) -> None:
        self.stream = stream
        self.label = label
        self.parser = hiredis.Reader(replyError=ReplyError)
        self.queued: list[tuple[bytes, _Waiter]] = []
        self.inflight: deque[_Waiter] = deque()
        self.wakeup = trio.Event()
        self.broken: ConnectionLost | None = None
        self.scope = trio.CancelScope()

    async def request(self, packed: bytes) -> Any:
        if self.broken is not None:
            raise self.broken
        waiter = _Waiter()
        self.queued.append((packed, waiter))
        self.wakeup.set()

        def abort(_: object) -> trio.lowlevel.Abort:
            waiter.abandoned = True
            return trio.lowlevel.Abort.SUCCEEDED

        return await trio.lowlevel.wait_task_rescheduled(abort)

    def fail(self, exc: BaseException | None) -> None:
        """Break the session: every caller queued or in flight gets ConnectionLost."""
        if self.broken is None:
            detail = f": {exc!r}" if exc is not None else ""
            self.broken = ConnectionLost(f"connection to {self.label} lost{detail}")
        for _, waiter in self.queued:
            self._wake(waiter, outcome.Error(self.broken))
        self.queued.clear()
        while self.inflight:
            self._wake(self.inflight.popleft(), outcome.Error(self.broken))
        self.scope.cancel()

    @staticmethod
    def _wake(waiter: _Waiter, result: outcome.Outcome[Any]) -> None:
        if not waiter.abandoned:
            waiter.abandoned = True
            trio.lowlevel.reschedule(waiter.task, result)

    async def write_loop(self) -> None:
        while True:
            if not self.queued:
                self.wakeup = trio.Event()
                await self.wakeup.wait()
                continue
            batch, self.queued = self.queued, []
            chunks = []
            for packed, waiter in batch:
                if not waiter.abandoned:  # cancelled before it was written: never sent
                    chunks.append(packed)
                    self.inflight.append(waiter)
            if chunks:
                await self.stream.send_all(b"".join(chunks))

    async def read_loop(self) -> None:
        parser, inflight = self.parser, self.inflight
        while True:
            data = await self.stream.receive_some(1 << 18)
            if not data:
                raise trio.BrokenResourceError("server closed the connection")
            parser.feed(data)
            while (reply := parser.gets()) is not False:
                waiter = inflight.popleft()
                if not waiter.abandoned:
                    waiter.abandoned = True
                    trio.lowlevel.reschedule(waiter.task, outcome.Value(reply))

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            with self.scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._guard, self.read_loop)
                    nursery.start_soon(self._guard, self.write_loop)
                    task_status.started()
        finally:
            self.fail(None)
            with trio.CancelScope(shield=True):
                with trio.move_on_after(1):
                    try:
                        await self.stream.aclose()
                    except _TRANSPORT_ERRORS:
                        pass

    async def _guard(self, loop: Any) -> None:
        try:
            await loop()
        except _TRANSPORT_ERRORS as exc:
            self.fail(exc)


class Connection:
    """A multiplexed, auto-pipelined RESP connection. Open one with :func:`connect`.

    Safe to share between any number of tasks. Use a connection of its own for blocking
    commands (BLPOP) and for pub/sub (:mod:`echomq._redis.pubsub`).
    """

    def __init__(self, config: ConnectionConfig, nursery: trio.Nursery) -> None:
        self.config = config
        self._nursery = nursery
        self._session: _Session | None = None
        self._lock = trio.Lock()
        self._closed = False
        self.reconnects = 0

    async def execute(self, *args: Arg) -> Any:
        """Send one command and return its reply; an error reply raises ``ServerError``."""
        return await self.execute_packed(hiredis.pack_command(args))

    async def execute_packed(self, packed: bytes) -> Any:
        deadline: float | None = None
        delay = 0.02
        while True:
            session = self._session
            if session is None or session.broken is not None:
                session = await self._connect()
            reply = await session.request(packed)
            if isinstance(reply, ReplyError):
                message = str(reply)
                if message.encode().startswith(_TRANSIENT):
                    now = trio.current_time()
                    if deadline is None:
                        deadline = now + self.config.connect_timeout
                    if now + delay < deadline:
                        await trio.sleep(delay)
                        delay = min(delay * 2, 0.5)
                        continue
                raise ServerError(message)
            return reply

    async def _connect(self) -> _Session:
        async with self._lock:
            if self._closed:
                raise ConnectionLost("connection is closed")
            session = self._session
            if session is not None and session.broken is None:
                return session
            deadline = trio.current_time() + self.config.connect_timeout
            delay = 0.02
            while True:
                try:
                    return await self._open_session()
                except (*_TRANSPORT_ERRORS, trio.TooSlowError) as exc:
                    if trio.current_time() + delay >= deadline:
                        raise ConnectionLost(
                            f"cannot connect to {self.config.display}: {exc!r}"
                        ) from exc
                except ConnectionLost:
                    if trio.current_time() + delay >= deadline:
                        raise
                await trio.sleep(delay)
                delay = min(delay * 2, 1.0)

    async def _open_session(self) -> _Session:
        stream = await open_stream(self.config)
        session = _Session(stream, self.config.display)
        await self._nursery.start(session.run)
        try:
            for command in self._handshake():
                reply = await session.request(hiredis.pack_command(command))
                if isinstance(reply, ReplyError):
                    raise ServerError(str(reply))
        except BaseException:
            session.fail(None)
            raise
        if self._session is not None:
            self.reconnects += 1
        self._session = session
        return session

    def _handshake(self) -> list[tuple[Arg, ...]]:
        config = self.config
        commands: list[tuple[Arg, ...]] = []
        if config.password is not None:
            if config.username:
                commands.append(("AUTH", config.username, config.password))
            else:
                commands.append(("AUTH", config.password))
        if config.db:
            commands.append(("SELECT", config.db))
        if config.client_name:
            commands.append(("CLIENT", "SETNAME", config.client_name))
        return commands

    def drop(self) -> None:
        """Break the current socket as if the network failed (for tests and shutdown)."""
        if self._session is not None:
            self._session.fail(None)

    async def aclose(self) -> None:
        self._closed = True
        self.drop()
        await trio.lowlevel.checkpoint()


@asynccontextmanager
async def connect(
    url: str | ConnectionConfig = "redis://127.0.0.1:6379/0", **options: Any
) -> AsyncIterator[Connection]:
    """Open a multiplexed connection; no I/O happens until the first command.

    ``options`` override fields of :class:`~echomq.config.ConnectionConfig`
    (``connect_timeout``, ``ssl_context``, ``client_name``...).
    """
    config = parse_url(url, **options)
    async with trio.open_nursery() as nursery:
        conn = Connection(config, nursery)
        try:
            yield conn
        finally:
            await conn.aclose()
            nursery.cancel_scope.cancel()


def pack(args: Sequence[Arg]) -> bytes:
    """Pack one command as RESP bytes (hiredis)."""
    return hiredis.pack_command(tuple(args))  # type: ignore[no-any-return]
