"""FaultProxy: a TCP proxy between clients (workers, producers) and Redis that fails on cue.

Give a worker ``proxy.url`` instead of Redis's; then, while it runs:

- ``await proxy.cut()``: every open connection is reset now (both sides see it closed);
- ``with proxy.refusing():``: new connections are reset as soon as they are accepted, so
  nothing reaches Redis (open ones carry on: ``cut()`` too for a full partition);
- ``proxy.delay = 0.05``: every byte is held 50 ms, each way (order kept, throughput not
  cut: chunks are timed, not serialised);
- ``proxy.cut_after(n, direction="to_client")``: once ``n`` more bytes went that way, the
  connection carrying them is cut in the middle of its stream (a reply half delivered).

Rule 1: the proxy forwards bytes and knows nothing of RESP; TLS passes through untouched
(the URL keeps its scheme, credentials, database and query; only the port changes).
Rule 2: every fault is observable: ``accepted``, ``refused``, ``cuts`` count, and
``wait_connected(n)`` waits until ``n`` connections are open (a client reconnected),
``wait_until(condition)`` until any condition on them holds.
Rule 3: a cut is a reset (SO_LINGER 0), not a polite close: the peer's next read fails.
One Redis node only: a cluster's clients learn the nodes' own addresses from the nodes.
"""

from __future__ import annotations

import math
import socket
import struct
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

import attrs
import trio

from ..errors import InvalidArgument

__all__ = ["Direction", "FaultProxy", "open_fault_proxy", "serve_fault_proxy"]

Direction = Literal["to_client", "to_redis"]
_CHUNK = 65536
_BUFFERED = 1024  # chunks held per direction while delayed (then the reader waits)


def _seconds(instance: object, attribute: attrs.Attribute[float], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise InvalidArgument(f"{attribute.name} must be >= 0 seconds, not {value!r}")
    if not math.isfinite(value):
        raise InvalidArgument(f"{attribute.name} must be finite, not {value!r}")


def _reset(stream: trio.SocketStream) -> None:
    """Make the coming close a reset (RST), not a FIN."""
    try:
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass


@attrs.define(eq=False)
class _Link:
    """One client connection and its upstream twin (None while it is being connected)."""

    client: trio.SocketStream
    upstream: trio.SocketStream | None = None
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    closed: trio.Event = attrs.field(factory=trio.Event)
    cut: bool = False

    def reset(self) -> None:
        self.cut = True
        self.scope.cancel()


@attrs.define(eq=False)
class FaultProxy:
    """A TCP proxy in front of one Redis. Make it with :func:`open_fault_proxy` (or
    ``await nursery.start(serve_fault_proxy, url)``); give clients :attr:`url`.

    Attributes:
        upstream: the Redis URL behind the proxy.
        delay: seconds every chunk is held, each way (settable at any time; >= 0).
        accepted: connections forwarded so far; ``refused``: reset on arrival;
            ``cuts``: connections cut (by :meth:`cut` or :meth:`cut_after`).
    """

    upstream: str
    delay: float = attrs.field(default=0.0, validator=_seconds)
    port: int = 0
    accepted: int = attrs.field(default=0, init=False)
    refused: int = attrs.field(default=0, init=False)
    cuts: int = attrs.field(default=0, init=False)
    _host: str = attrs.field(init=False)
    _upstream_port: int = attrs.field(init=False)
    _links: set[_Link] = attrs.field(factory=set, init=False)
    _refusing: int = attrs.field(default=0, init=False)
    _trip: dict[str, int] = attrs.field(factory=dict, init=False)
    _changed: trio.Event = attrs.field(factory=trio.Event, init=False)

    def __attrs_post_init__(self) -> None:
        parts = urlsplit(self.upstream)
        if parts.scheme not in ("redis", "rediss") or not parts.port:
            raise InvalidArgument(
                f"FaultProxy needs a redis:// or rediss:// URL with host and port, "
                f"not {self.upstream!r}"
            )
        self._host, self._upstream_port = parts.hostname or "127.0.0.1", parts.port

    @property
    def url(self) -> str:
        """The upstream URL with the proxy's port (credentials, db, query kept)."""
        if not self.port:
            raise RuntimeError("the proxy is not serving yet")
        parts = urlsplit(self.upstream)
        auth, _, _ = parts.netloc.rpartition("@")
        netloc = f"{auth}@127.0.0.1:{self.port}" if auth else f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    @property
    def connections(self) -> int:
        """Connections open through the proxy now (both sides connected)."""
        return sum(link.upstream is not None for link in self._links)

    # -- faults ------------------------------------------------------------------------------

    async def cut(self) -> int:
        """Reset every connection now, those still connecting to Redis too; answer how
        many (all closed on return)."""
        links = list(self._links)
        for link in links:
            link.reset()
        for link in links:
            await link.closed.wait()
        return len(links)

    @contextmanager
    def refusing(self) -> Iterator[None]:
        """New connections are reset on arrival for the block (open ones carry on)."""
        self._refusing += 1
        try:
            yield
        finally:
            self._refusing -= 1

    def cut_after(self, nbytes: int, *, direction: Direction = "to_client") -> None:
        """Arm one cut: once ``nbytes`` more bytes went ``direction`` (over any connection),
        forward only up to that byte and cut the connection carrying it.

        Raises:
            InvalidArgument: ``nbytes`` < 0 or an unknown direction.
        """
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise InvalidArgument(f"nbytes must be an int >= 0, not {nbytes!r}")
        if direction not in ("to_client", "to_redis"):
            raise InvalidArgument(f"direction must be 'to_client' or 'to_redis', not {direction!r}")
        self._trip[direction] = nbytes

    async def wait_connected(self, count: int = 1) -> None:
        """Wait until at least ``count`` connections are open (e.g. a client reconnected)."""
        await self.wait_until(lambda: self.connections >= count)

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        """Wait until ``condition()`` holds, checked whenever a connection is opened,
        closed, cut or refused: ``await proxy.wait_until(lambda: proxy.refused >= 2)``."""
        while not condition():
            await self._changed.wait()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    # -- serving -----------------------------------------------------------------------------

    async def serve(
        self, *, task_status: trio.TaskStatus[FaultProxy] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Listen on 127.0.0.1 (``port``, 0: any free one) until cancelled."""
        listeners = await trio.open_tcp_listeners(self.port, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(trio.serve_listeners, self._handle, listeners)
                task_status.started(self)
        finally:
            self.port = 0

    async def _handle(self, client: trio.SocketStream) -> None:
        if self._refusing:
            await self._refuse(client)
            return
        link = _Link(client)
        self._links.add(link)  # cut() reaches it from now on, connected or not
        try:
            with link.scope:
                try:
                    link.upstream = await trio.open_tcp_stream(self._host, self._upstream_port)
                except OSError:  # Redis is down: the client sees what it would see without us
                    self._links.discard(link)
                    await self._refuse(client)
                    return
                self.accepted += 1
                self._notify()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._pump, link, client, link.upstream, "to_redis")
                    nursery.start_soon(self._pump, link, link.upstream, client, "to_client")
        finally:
            self._links.discard(link)
            ends = [client] if link.upstream is None else [client, link.upstream]
            if link.cut:
                self.cuts += 1
                for stream in ends:
                    _reset(stream)
            with trio.CancelScope(shield=True):
                for stream in ends:
                    await stream.aclose()
            link.closed.set()
            self._notify()

    async def _refuse(self, client: trio.SocketStream) -> None:
        self.refused += 1
        self._notify()
        _reset(client)
        await client.aclose()

    async def _pump(
        self, link: _Link, src: trio.SocketStream, dst: trio.SocketStream, direction: Direction
    ) -> None:
        """Read ``src``, time each chunk, deliver in order; the end of either ends the link."""
        send, receive = trio.open_memory_channel[tuple[float, bytes | None]](_BUFFERED)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._deliver, link, receive, dst)
            async with send:
                while True:
                    try:
                        data = await src.receive_some(_CHUNK)
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        data = b""
                    if not data:
                        break
                    data, cut_here = self._tripped(direction, data)
                    due = trio.current_time() + self.delay
                    if data:
                        await send.send((due, data))
                    if cut_here:
                        await send.send((due, None))
                        break
        link.scope.cancel()  # one side ended (or was cut): end the other too

    async def _deliver(
        self,
        link: _Link,
        receive: trio.MemoryReceiveChannel[tuple[float, bytes | None]],
        dst: trio.SocketStream,
    ) -> None:
        async with receive:
            async for due, data in receive:
                await trio.sleep_until(due)
                if data is None:
                    link.reset()
                    return
                try:
                    await dst.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    link.scope.cancel()
                    return

    def _tripped(self, direction: str, data: bytes) -> tuple[bytes, bool]:
        """The part of ``data`` to forward, and whether to cut after it (cut_after)."""
        left = self._trip.get(direction)
        if left is None:
            return data, False
        if len(data) < left:
            self._trip[direction] = left - len(data)
            return data, False
        del self._trip[direction]
        return data[:left], True


@asynccontextmanager
async def open_fault_proxy(upstream: str, *, delay: float = 0.0) -> AsyncIterator[FaultProxy]:
    """A :class:`FaultProxy` in front of ``upstream`` (a ``redis://`` URL) for the block.

    Raises:
        InvalidArgument: not a redis:// / rediss:// URL with a port, or a bad delay.
    """
    proxy = FaultProxy(upstream, delay=delay)
    failure: BaseException | None = None
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.serve)
        try:
            yield proxy
        except BaseException as exc:  # raised below as itself, not in an exception group
            failure = exc
        nursery.cancel_scope.cancel()
    if failure is not None:
        try:
            raise failure
        finally:
            failure = None


async def serve_fault_proxy(
    upstream: str,
    *,
    delay: float = 0.0,
    task_status: trio.TaskStatus[FaultProxy] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run a :class:`FaultProxy` until cancelled; ``nursery.start`` answers it."""
    await FaultProxy(upstream, delay=delay).serve(task_status=task_status)
