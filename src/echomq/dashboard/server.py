"""The dashboard server: the page, its assets and the websocket on one loopback port.

Rule 1: loopback by default. A websocket handshake whose ``Origin`` is not this server's
own (``http://127.0.0.1:PORT``, ``http://localhost:PORT``, ``http://[::1]:PORT`` or the
bound host) is refused with 403 before trio-websocket sees it; a handshake with no Origin
(not a browser) is accepted. Plain requests must name one of those hosts too (DNS
rebinding).
Rule 2: reading is open to whoever reaches the port; every operator command needs the
token (printed at start, or given). The page takes it from the URL fragment
(``#token=...``), which browsers never send to a server.
Rule 3: ``serve_dashboard`` follows trio's ``serve_*`` shape: it runs until cancelled and
``nursery.start`` answers a :class:`DashboardInfo` once the port is listening and the
first snapshot is ready.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from typing import Any

import attrs
import trio
import trio_websocket

from .. import __version__, jobs
from .._redis.connection import Connection, connect
from .._redis.keyspace import check_queue
from ..config import DEFAULT_URL, ConnectionConfig
from ..errors import EchoMQError
from .commands import CommandRefused, run_command, token_matches
from .http_io import ASSETS, BadRequest, Head, ReplayStream, load_asset, read_head, respond
from .http_io import security_headers as _security_headers
from .hub import Hub, first_error
from .messages import (
    AuthRequest,
    BadMessage,
    CommandRequest,
    LogsRequest,
    auth_reply,
    encode,
    hello,
    parse_request,
    result_reply,
)

__all__ = ["DashboardInfo", "run_dashboard", "serve_dashboard"]

log = logging.getLogger("echomq.dashboard")

WS_PATH = "/ws"
HANDSHAKE_TIMEOUT = 10.0
CLOSE_TIMEOUT = 2.0
DEFAULT_HISTORY = 300  # throughput points kept: 5 minutes at one poll a second
_WILDCARDS = {"", "0.0.0.0", "::"}
# what a browser going away looks like, from trio and from trio-websocket
_GONE = (
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    OSError,
    trio_websocket.ConnectionClosed,
    trio_websocket.HandshakeError,
)
_LOOPBACK_NAMES = {"127.0.0.1", "localhost", "[::1]"}


@attrs.frozen(kw_only=True)
class DashboardInfo:
    """Where a started dashboard listens, and its operator token."""

    host: str
    port: int
    token: str = attrs.field(repr=False)

    @property
    def url(self) -> str:
        """The page's address (no token)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        host = "127.0.0.1" if self.host in _WILDCARDS else host
        return f"http://{host}:{self.port}/"

    @property
    def login_url(self) -> str:
        """The page's address with the token in the fragment: buttons work at once."""
        return f"{self.url}#token={self.token}"


def _host_name(host_header: str) -> str:
    """``host:port`` -> ``host`` (IPv6 kept in brackets)."""
    if host_header.startswith("["):
        return host_header.split("]", 1)[0] + "]"
    return host_header.rsplit(":", 1)[0] if ":" in host_header else host_header


@attrs.frozen(kw_only=True)
class Gate:
    """Which Host and Origin values this server answers to."""

    bind_host: str
    port: int

    @property
    def names(self) -> set[str]:
        bound = f"[{self.bind_host}]" if ":" in self.bind_host else self.bind_host
        return _LOOPBACK_NAMES | ({bound} if self.bind_host not in _WILDCARDS else set())

    def host_ok(self, head: Head) -> bool:
        if self.bind_host in _WILDCARDS:
            return True
        host = head.headers.get("host")
        return host is None or _host_name(host.lower()) in self.names

    def origin_ok(self, head: Head) -> bool:
        origin = head.headers.get("origin")
        if origin is None:
            return True  # not a browser: no ambient credentials to abuse
        origin = origin.lower()
        if origin in {f"http://{name}:{self.port}" for name in self.names}:
            return True
        # bound to a wildcard: the page's own origin is whatever host the browser used
        return self.bind_host in _WILDCARDS and origin == f"http://{head.headers.get('host', '')}"


@attrs.define(eq=False)
class _Server:
    hub: Hub
    gate: Gate
    token: str
    connect_src: str = ""

    async def handle(self, stream: trio.SocketStream) -> None:
        """One TCP connection: a page request or a websocket."""
        try:
            await self._handle(stream)
        except* _GONE:
            pass  # the browser went away
        finally:
            with trio.move_on_after(CLOSE_TIMEOUT) as scope:
                scope.shield = True
                await stream.aclose()

    async def _handle(self, stream: trio.SocketStream) -> None:
        try:
            head, raw, rest = await read_head(stream)
        except BadRequest as exc:
            await respond(stream, exc.status, str(exc).encode())
            return
        if not self.gate.host_ok(head):
            await respond(stream, 421, b"unknown Host: use 127.0.0.1 or localhost")
            return
        if head.path == WS_PATH and head.is_websocket:
            if not self.gate.origin_ok(head):
                log.warning("refused websocket from Origin %r", head.headers.get("origin"))
                await respond(stream, 403, b"foreign Origin refused")
                return
            await self._websocket(ReplayStream(stream, raw + rest))
            return
        if head.method not in ("GET", "HEAD"):
            await respond(stream, 405, b"method not allowed")
            return
        asset = ASSETS.get(head.path)
        if asset is None:
            await respond(stream, 404, b"not found", head_only=head.method == "HEAD")
            return
        name, content_type = asset
        host = head.headers.get("host", f"127.0.0.1:{self.gate.port}")
        await respond(
            stream,
            200,
            load_asset(name),
            content_type=content_type,
            head_only=head.method == "HEAD",
            extra=_security_headers(f"'self' ws://{host}"),
        )

    async def _websocket(self, stream: ReplayStream) -> None:
        async with trio.open_nursery() as nursery:
            ws: trio_websocket.WebSocketConnection | None = None
            with trio.move_on_after(HANDSHAKE_TIMEOUT):
                request = await trio_websocket.wrap_server_stream(nursery, stream)
                ws = await request.accept()
            if ws is None:
                nursery.cancel_scope.cancel()
                return
            try:
                await self._session(ws)
            finally:
                with trio.move_on_after(CLOSE_TIMEOUT) as scope:
                    scope.shield = True
                    await ws.aclose()

    async def _session(self, ws: trio_websocket.WebSocketConnection) -> None:
        hub = self.hub
        send, receive = hub.attach()
        try:
            await ws.send_message(
                encode(
                    hello(
                        version=__version__,
                        queues=list(hub.queues),
                        interval=hub.interval,
                        history=hub.history,
                    )
                )
            )
            await ws.send_message(encode(hub.status))
            if hub.snapshot is not None:
                await ws.send_message(encode(hub.snapshot))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._forward, ws, receive)
                await self._requests(ws)
                nursery.cancel_scope.cancel()
        finally:
            hub.detach(send)

    async def _forward(
        self, ws: trio_websocket.WebSocketConnection, receive: trio.MemoryReceiveChannel[Any]
    ) -> None:
        async for message in receive:
            await ws.send_message(encode(message))

    async def _requests(self, ws: trio_websocket.WebSocketConnection) -> None:
        """Answer the browser's requests, one at a time, until it goes away."""
        while True:
            try:
                text = await ws.get_message()
            except trio_websocket.ConnectionClosed:
                return
            try:
                request = parse_request(text)
            except BadMessage as exc:
                await ws.send_message(
                    encode(result_reply(-1, ok=False, error=str(exc), kind="bad_message"))
                )
                continue
            await ws.send_message(encode(await self._answer(request)))

    async def _answer(self, request: AuthRequest | CommandRequest | LogsRequest) -> dict[str, Any]:
        if isinstance(request, AuthRequest):
            return auth_reply(token_matches(self.token, request.token))
        if isinstance(request, LogsRequest):
            try:
                lines = await jobs.get_job_logs(self.hub.conn, request.queue, request.job)
            except EchoMQError as exc:
                return result_reply(request.ref, ok=False, error=str(exc), kind=_kind(exc))
            return result_reply(request.ref, ok=True, value=lines)
        try:
            value = await run_command(self.hub.conn, request, self.token)
        except CommandRefused as exc:
            log.warning("refused %s on %s: %s", request.action, request.queue, exc)
            return result_reply(request.ref, ok=False, error=str(exc), kind=exc.kind)
        except EchoMQError as exc:
            return result_reply(request.ref, ok=False, error=str(exc), kind=_kind(exc))
        log.info("%s %s %s -> %r", request.action, request.queue, request.job or "", value)
        self.hub.poll_soon()
        return result_reply(request.ref, ok=True, value=value)


def _kind(exc: Exception) -> str:
    return type(exc).__name__


@asynccontextmanager
async def _connection(
    url_or_conn: str | ConnectionConfig | Connection,
) -> AsyncIterator[Connection]:
    if isinstance(url_or_conn, Connection):
        yield url_or_conn
        return
    async with connect(url_or_conn) as conn:
        yield conn


async def serve_dashboard(
    url_or_conn: str | ConnectionConfig | Connection = DEFAULT_URL,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    queues: Sequence[str] | None = None,
    interval: float = 1.0,
    history: int = DEFAULT_HISTORY,
    task_status: trio.TaskStatus[DashboardInfo] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the live dashboard until cancelled.

    Args:
        url_or_conn: a redis URL, a ``ConnectionConfig``, or an open ``Connection`` (its
            settings are used for the pub/sub connection too).
        host, port: where to listen; loopback and a free port by default.
        token: the operator token; a random one when None (read it from the answered
            :class:`DashboardInfo`).
        queues: the queues to show; all queues found in Redis (rescanned) when None.
        interval: seconds between two polls of the counts.
        history: throughput points kept per queue (one per poll).

    Raises:
        InvalidKey: a bad queue name, before any I/O.
        InvalidArgument: a bad interval or history.
    """
    from ..errors import InvalidArgument

    names = [check_queue(q) for q in queues] if queues is not None else None
    if not interval > 0 or not 1 <= history <= 10_000:
        raise InvalidArgument("interval must be > 0 and history in 1..10000")
    if token is not None and not token:
        raise InvalidArgument("token must not be empty")
    token = token or secrets.token_urlsafe(18)
    async with _connection(url_or_conn) as conn:
        hub = Hub(conn, conn.config, queues=names, interval=interval, history=history)
        async with trio.open_nursery() as nursery:
            await nursery.start(hub.run)  # first: Redis unreachable fails before we listen
            listeners = await trio.open_tcp_listeners(port, host=host)
            for extra in listeners[1:]:
                await extra.aclose()  # one address family is enough; its port is the one shown
            listener = listeners[0]
            bound_port: int = listener.socket.getsockname()[1]
            gate = Gate(bind_host=host, port=bound_port)
            server = _Server(hub=hub, gate=gate, token=token)
            await nursery.start(trio.serve_listeners, server.handle, [listener])
            task_status.started(DashboardInfo(host=host, port=bound_port, token=token))


async def _serve_until_signal(url: str, **options: Any) -> None:
    """Serve (with a private redis-server for ``embedded://``) until SIGINT or SIGTERM."""
    from ..testing import open_redis_server

    async with trio.open_nursery() as nursery:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with AsyncExitStack() as stack:
                embedded = None
                if url.startswith("embedded://"):
                    embedded = await stack.enter_async_context(open_redis_server())
                    url = embedded.url
                info = await nursery.start(partial(serve_dashboard, url, **options))
                _announce(info, embedded=embedded.url if embedded else None)
                async for _ in signals:
                    break
                nursery.cancel_scope.cancel()


def _announce(info: DashboardInfo, embedded: str | None = None) -> None:
    print(f"echomq dashboard on {info.url}", flush=True)
    print(f"  operator token: {info.token}", flush=True)
    print(f"  open with the token: {info.login_url}", flush=True)
    if embedded:
        print(f"  (embedded redis-server at {embedded})", flush=True)
    print("Press Ctrl-C to stop.", flush=True)


def run_dashboard(
    *,
    url: str | None = None,
    host: str = "127.0.0.1",
    port: int | None = 8000,
    token: str | None = None,
    queues: Sequence[str] | None = None,
) -> int:
    """Serve the dashboard until Ctrl-C (the CLI's ``echomq dashboard``); answer an exit code.

    ``url`` None means ``$ECHOMQ_URL``, else the default local Redis; ``embedded://``
    starts a private redis-server for the session.
    """
    url = url or os.environ.get("ECHOMQ_URL") or DEFAULT_URL
    port = 8000 if port is None else port
    options = {
        "host": host,
        "port": port,
        "token": token,
        "queues": list(queues) if queues else None,
    }
    try:
        trio.run(partial(_serve_until_signal, url, **options))
    except (EchoMQError, OSError, BaseExceptionGroup) as exc:
        error = first_error(exc)
        if not isinstance(error, EchoMQError | OSError):
            raise
        print(f"echomq dashboard: {error}", file=sys.stderr)
        return 1
    return 0
