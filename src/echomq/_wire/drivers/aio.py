"""The asyncio wire: redis.asyncio behind the verbs' connection interface.

Every verb is a coroutine over ``execute`` (and ``execute_pipeline``/``every_master`` for
a few reads), so the same verbs run on asyncio unchanged:
``await echomq.admin.pause(aconn, "q")`` with an :class:`AsyncioConnection`.

Rule 1 (one server: auto-pipelining, as the trio wire). redis.asyncio dials (TCP, unix
socket, TLS) and shakes hands (AUTH, SELECT, CLIENT SETNAME); then commands from every
task of the loop share that one socket: each call packs its command (hiredis) into an
outbox, one write per loop turn sends the outbox, and one reader task parses replies
(hiredis) and hands each to the caller whose command was next in line. redis.asyncio's
own pool sends one command per round trip per socket: five times slower at 64 callers.
Rule 2 (a Redis Cluster): redis.asyncio's ``RedisCluster`` routes each command to its
slot's master and follows MOVED/ASK; one command per round trip per node.
Rule 3 (no replay): when the socket drops, every command queued or in flight fails with
:class:`~echomq.errors.ConnectionLost`; nothing is sent again (a script may have run).
The next call connects again. A transient refusal (``LOADING``, ``BUSY``, ``MASTERDOWN``,
``TRYAGAIN``, ``CLUSTERDOWN``, a script's "non local key"...: ``server_errors.TRANSIENT``)
did not run the command: it is sent again after a backoff, within ``connect_timeout``, on
one server and on a cluster alike; then :class:`~echomq.errors.Unavailable`, as on the trio
wire.
Rule 4: a connection belongs to the event loop that first used it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from typing import Any

from ..._jitter import Backoff
from ...config import ConnectionConfig, parse_url
from ...errors import ConnectionLost, InvalidArgument, Unavailable
from ..connection import Arg, ReplyError, new_parser, pack_command
from ..hashslots import command_slot
from ..server_errors import is_transient, server_error
from .redispy import client_options, redis_errors, wire_error

__all__ = [
    "AsyncioClusterConnection",
    "AsyncioConnection",
    "asyncio_connection",
]

_CHUNK = 1 << 16


def _word(arg: Arg) -> str:
    return (arg.decode() if isinstance(arg, bytes) else str(arg)).upper()


def asyncio_connection(
    url: str | ConnectionConfig, **options: Any
) -> AsyncioConnection | AsyncioClusterConnection:
    """An asyncio connection for ``url``; no I/O until the first command.

    ``options`` override fields of :class:`~echomq.config.ConnectionConfig`; a
    ``redis+cluster://`` URL answers an :class:`AsyncioClusterConnection`.

    Raises:
        InvalidArgument: a bad URL, or an ``ssl_context`` (use the ``ssl_*`` parameters).
    """
    config = parse_url(url, **options)
    client_options(config)  # refuses an ssl_context before any I/O
    if config.cluster:
        return AsyncioClusterConnection(config)
    return AsyncioConnection(config)


class AsyncioConnection:
    """One server, auto-pipelined (rule 1). Safe to share between the tasks of one loop."""

    sharded_pubsub = False

    def __init__(self, config: ConnectionConfig) -> None:
        if config.cluster:
            raise InvalidArgument("AsyncioConnection is for one server: use asyncio_connection")
        self.config = config
        self._raw: Any = None  # the redis.asyncio Connection that dialled
        self._transport: asyncio.WriteTransport | None = None
        self._waiting: deque[asyncio.Future[Any]] = deque()
        self._outbox: list[bytes] = []
        self._flush_pending = False
        self._reader: asyncio.Task[None] | None = None
        self._lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self.reconnects = -1  # sessions opened after the first

    # -- commands ------------------------------------------------------------------------

    async def execute(self, *args: Arg) -> Any:
        """Send one command and return its reply; an error reply raises ``ServerError``.

        Raises:
            ConnectionLost: the socket dropped before the reply came (never replayed), or
                the server could not be reached.
            AuthenticationError, PermissionDenied, TLSError, ServerError: as on the trio wire.
        """
        return await self.execute_packed(pack_command(args))

    async def execute_packed(self, packed: bytes) -> Any:
        """Like :meth:`execute`, for a command already packed."""
        reply = await self._request(packed)
        if isinstance(reply, ReplyError):
            return await self._after_error(packed, str(reply))
        return reply

    async def execute_pipeline(self, commands: Sequence[Sequence[Arg]]) -> list[Any]:
        """Several commands in one write, in order; every reply, error replies as values."""
        if not commands:
            return []
        if self._transport is None:
            await self._connect()
        futures = [self._send(pack_command(tuple(command))) for command in commands]
        replies = [await future for future in futures]
        return [server_error(str(r)) if isinstance(r, ReplyError) else r for r in replies]

    async def every_master(self) -> Sequence[AsyncioConnection]:
        """The connections that together hold every key: itself."""
        return [self]

    async def _request(self, packed: bytes) -> Any:
        if self._transport is None:
            await self._connect()
        return await self._send(packed)

    def _send(self, packed: bytes) -> asyncio.Future[Any]:
        loop = self._loop
        assert loop is not None
        if self._transport is None:  # dropped between the connect and here
            failed: asyncio.Future[Any] = loop.create_future()
            failed.set_exception(ConnectionLost(f"{self.config.display}: connection dropped"))
            return failed
        future: asyncio.Future[Any] = loop.create_future()
        self._waiting.append(future)
        self._outbox.append(packed)
        if not self._flush_pending:
            self._flush_pending = True
            loop.call_soon(self._flush)
        return future

    def _flush(self) -> None:
        """One write for everything queued during this loop turn."""
        self._flush_pending = False
        data, self._outbox = self._outbox, []
        if data and self._transport is not None:
            self._transport.writelines(data)

    async def _after_error(self, packed: bytes, message: str) -> Any:
        """Raise the reply's error; a transient refusal (not run) is sent again, with backoff."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.connect_timeout
        backoff = Backoff(0.01, 0.5)
        while is_transient(message):
            wait = backoff.next()
            if loop.time() + wait >= deadline:
                break
            await asyncio.sleep(wait)
            reply = await self._request(packed)
            if not isinstance(reply, ReplyError):
                return reply
            message = str(reply)
        raise server_error(message)

    # -- the session ---------------------------------------------------------------------

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop, self._lock = loop, asyncio.Lock()
        elif self._loop is not loop:
            raise RuntimeError("this echomq asyncio connection belongs to another event loop")
        assert self._lock is not None
        async with self._lock:
            if self._closed:
                raise ConnectionLost("connection is closed")
            if self._transport is not None:
                return
            raw = _make_raw(self.config)
            with redis_errors():
                await raw.connect()
            reader: asyncio.StreamReader | None = getattr(raw, "_reader", None)
            writer: asyncio.StreamWriter | None = getattr(raw, "_writer", None)
            if reader is None or writer is None:  # a redis-py whose internals moved
                await raw.disconnect()
                raise RuntimeError("this redis-py's asyncio Connection has no streams")
            self._raw = raw
            self._transport = writer.transport
            self._reader = loop.create_task(self._read(reader))
            self.reconnects += 1

    async def _read(self, stream: asyncio.StreamReader) -> None:
        parser = new_parser()
        waiting = self._waiting
        why = "the server closed the connection"
        try:
            while True:
                data = await stream.read(_CHUNK)
                if not data:
                    break
                parser.feed(data)
                while (reply := parser.gets()) is not False:
                    future = waiting.popleft()
                    if not future.done():  # a caller that gave up: its reply is dropped
                        future.set_result(reply)
        except asyncio.CancelledError:
            why = "connection is closed"
            raise
        except Exception as exc:  # OSError, a protocol error: the session is over
            why = f"{type(exc).__name__}: {exc}"
        finally:
            self._lost(f"{self.config.display}: {why}")

    def _lost(self, why: str) -> None:
        """Fail every command queued or in flight (never replayed); the next call dials."""
        transport, self._transport = self._transport, None
        self._outbox = []
        waiting, self._waiting = self._waiting, deque()
        for future in waiting:
            if not future.done():
                future.set_exception(ConnectionLost(why))
        raw, self._raw = self._raw, None
        close = getattr(raw, "_close", None)  # redis-py's silent close (no await)
        if close is not None:
            close()
        elif transport is not None:
            transport.close()

    def drop(self) -> None:
        """Break the socket as if the network failed (tests)."""
        if self._transport is not None:
            self._transport.abort()

    async def aclose(self) -> None:
        """Close; later commands raise ``ConnectionLost``."""
        self._closed = True
        reader, self._reader = self._reader, None
        if reader is not None and not reader.done():
            reader.cancel()
            try:
                await reader
            except asyncio.CancelledError:
                pass
        self._lost("connection is closed")


def _make_raw(config: ConnectionConfig) -> Any:
    """A redis.asyncio Connection for ``config`` (RESP2, no retries)."""
    from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    options = client_options(config)
    tls = options.pop("ssl", False)
    options["retry"] = Retry(NoBackoff(), 0)
    options["db"] = config.db
    if config.unix_path:
        for name in [k for k in options if k.startswith("ssl")]:
            del options[name]
        return UnixDomainSocketConnection(path=config.unix_path, **options)
    if tls:
        return SSLConnection(host=config.host, port=config.port, **options)
    return Connection(host=config.host, port=config.port, **options)


class AsyncioClusterConnection:
    """A Redis Cluster through redis.asyncio's ``RedisCluster`` (rule 2)."""

    sharded_pubsub = True  # the scripts publish with SPUBLISH on a cluster

    def __init__(self, config: ConnectionConfig) -> None:
        self.config = config
        self._client: Any = None
        self._masters: dict[tuple[str, int], AsyncioConnection] = {}

    async def client(self) -> Any:
        """redis.asyncio's ``RedisCluster``, made (and its layout read) on first use."""
        if self._client is None:
            from redis.asyncio.cluster import ClusterNode, RedisCluster
            from redis.asyncio.retry import Retry
            from redis.backoff import NoBackoff

            options = client_options(self.config)
            nodes = [ClusterNode(host, port) for host, port in self.config.cluster_nodes]
            client = RedisCluster(startup_nodes=nodes, retry=Retry(NoBackoff(), 0), **options)
            with redis_errors():
                await client.initialize()
            self._client = client
        return self._client

    async def execute(self, *args: Arg) -> Any:
        """One command, routed by its key; an error reply raises ``ServerError``.

        A ``SCAN`` goes to one node (redis-py would run it on every node): the master of
        its ``MATCH`` pattern's hash tag, else any master (``slots.command_slot``).
        """
        client = await self.client()
        if _word(args[0]) == "SCAN":
            slot = command_slot(args)
            node = (
                client.nodes_manager.get_node_from_slot(slot)
                if slot >= 0
                else client.get_default_node()
            )
            return await self._master(node.host, node.port).execute(*args)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.connect_timeout
        backoff = Backoff(0.01, 0.5)
        while True:  # a transient refusal did not run: sent again within connect_timeout
            try:
                with redis_errors():
                    return await client.execute_command(*args)
            except Unavailable:
                wait = backoff.next()
                if loop.time() + wait >= deadline:
                    raise
                await asyncio.sleep(wait)

    def _master(self, host: str, port: int) -> AsyncioConnection:
        master = self._masters.get((host, port))
        if master is None:
            master = self._masters[(host, port)] = AsyncioConnection(
                self.config.for_node(host, port)
            )
        return master

    async def execute_pipeline(self, commands: Sequence[Sequence[Arg]]) -> list[Any]:
        """Each command in turn (they may live on several nodes); errors as values."""
        replies: list[Any] = []
        for command in commands:
            try:
                replies.append(await self.execute(*command))
            except ConnectionLost:
                raise
            except Exception as exc:
                error = wire_error(exc)
                replies.append(exc if error is None else error)
        return replies

    async def every_master(self) -> Sequence[AsyncioConnection]:
        """One single-server connection per master (a keyless command such as SCAN goes
        to that node only)."""
        client = await self.client()
        return [self._master(node.host, node.port) for node in client.get_primaries()]

    async def aclose(self) -> None:
        """Close every node's connections."""
        masters, self._masters = self._masters, {}
        for master in masters.values():
            await master.aclose()
        if self._client is not None:
            await self._client.aclose()
