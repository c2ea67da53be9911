"""The dashboard server: the page, its assets and the websocket on one loopback port.

Rule 1: loopback by default. A websocket handshake whose ``Origin`` is not this server's
own (``http://127.0.0.1:PORT``, ``http://localhost:PORT``, ``http://[::1]:PORT``, the
bound address, or a name given in ``allowed_hosts``) is refused with 403 before
trio-websocket sees it; a handshake with no Origin (not a browser) is accepted. Every
request must name one of those hosts in ``Host`` (DNS rebinding): that check, and the
HTTP limits, are the shared server's (``echomq._http``), and never off. Binding anything
but loopback needs an explicit ``allowed_hosts`` list, and warns.
Rule 2: reading is open to whoever reaches the port; every operator command needs the
token (printed at start, or given). The page takes it from the URL fragment
(``#token=...``), which browsers never send to a server.
Rule 3: ``serve_dashboard`` follows trio's ``serve_*`` shape: it runs until cancelled and
``nursery.start`` answers a :class:`DashboardInfo` once the port is listening and the
first snapshot is ready.
Rule 4: no message kills the server. A browser message the parser refuses is answered
with a ``bad_message`` result naming the reason, and the connection stays; a message
longer than ``MAX_WS_MESSAGE`` closes it (1009). Whatever fails while answering one
request is logged and answered ``internal``; whatever fails in one connection ends that
connection only (the shared server logs it once).
"""

from __future__ import annotations

import logging
import re
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
from prometheus_client.core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from .. import __version__, admin, jobs
from .._http import (
    WILDCARDS,
    HostRule,
    Request,
    check_allowed_host,
    host_name,
    is_loopback,
    serve_http,
)
from .._scripts.keyspace import check_queue
from .._wire.connection import Connection
from .._wire.dial import connect
from .._worker.metrics import queue_families, render
from ..config import (
    DEFAULT_URL,
    ConnectionConfig,
    check_bind_host,
    resolve_bind_host,
    resolve_url,
)
from ..errors import EchoMQError, InvalidArgument
from .commands import CommandRefused, not_shown, run_command, token_matches
from .flow_view import read_flow
from .history_panel import ArchiveSource, check_archive_url
from .http_io import ASSETS, Head, load_asset
from .http_io import security_headers as _security_headers
from .hub import Hub, first_error
from .messages import (
    AuthRequest,
    BadMessage,
    CommandRequest,
    FlowRequest,
    HistoryRequest,
    LogsRequest,
    auth_reply,
    encode,
    hello,
    parse_request,
    refusal,
    result_reply,
)

__all__ = ["DashboardInfo", "check_options", "run_dashboard", "serve_dashboard"]

log = logging.getLogger("echomq.dashboard")

WS_PATH = "/ws"
HANDSHAKE_TIMEOUT = 10.0
CLOSE_TIMEOUT = 2.0
MAX_WS_MESSAGE = 64 * 1024  # bytes; longer closes the connection (1009), shorter is parsed
DEFAULT_HISTORY = 300  # throughput points kept: 5 minutes at one poll a second
# what a browser going away looks like to trio-websocket (trio's own: echomq._http.GONE)
_WS_GONE = (trio_websocket.ConnectionClosed, trio_websocket.HandshakeError)
_TOKEN = re.compile(r"[A-Za-z0-9._~-]{8,256}")


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
        host = "127.0.0.1" if self.host in WILDCARDS else host
        return f"http://{host}:{self.port}/"

    @property
    def login_url(self) -> str:
        """The page's address with the token in the fragment: buttons work at once."""
        return f"{self.url}#token={self.token}"


def check_token(token: object) -> str:
    """An operator token: 8..256 characters of ``[A-Za-z0-9._~-]`` (it travels in URLs)."""
    if not isinstance(token, str) or not _TOKEN.fullmatch(token):
        raise InvalidArgument(  # the rejected value is not echoed: it may be a secret
            "the token must be 8..256 characters of letters, digits and . _ ~ - "
            "(it travels in the page's URL)"
        )
    return token


def check_port(port: object) -> int:
    """A TCP port, 0..65535 (0: any free port)."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise InvalidArgument(f"port must be an int in 0..65535 (0: any free port), not {port!r}")
    return port


@attrs.frozen(kw_only=True)
class Gate:
    """Which Host and Origin values this server answers to.

    ``allowed``: host names given by the operator (``--allow-host``); a browser may use
    them on any port and scheme (a reverse proxy in front). Loopback names and the bound
    address must come with this server's own port.
    """

    bind_host: str
    port: int
    allowed: frozenset[str] = frozenset()

    @property
    def hosts(self) -> HostRule:
        """The Host rule (the shared server applies it to every request)."""
        return HostRule(bind_host=self.bind_host, allowed=self.allowed)

    @property
    def own_names(self) -> frozenset[str]:
        return self.hosts.own_names

    def host_ok(self, head: Head) -> bool:
        return self.hosts.allows(head.host)

    def origin_ok(self, head: Head) -> bool:
        origin = head.headers.get("origin")
        if origin is None:
            return True  # not a browser: no ambient credentials to abuse
        origin = origin.lower()
        if origin in {f"http://{name}:{self.port}" for name in self.own_names}:
            return True
        scheme, sep, rest = origin.partition("://")
        return bool(sep) and scheme in ("http", "https") and host_name(rest) in self.allowed


METRICS_PATH = "/metrics"
METRICS_TIMEOUT = 10.0


class _Families(Collector):
    """Families built at scrape time, handed to a registry of their own."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


@attrs.define(eq=False)
class _Server:
    hub: Hub
    gate: Gate
    token: str
    connect_src: str = ""
    archive: ArchiveSource | None = None

    async def handle(self, request: Request) -> None:
        """One request past the shared server's checks: a page, /metrics or a websocket."""
        head = request.head
        if head.path == WS_PATH and head.is_websocket:
            if not self.gate.origin_ok(head):
                log.warning("refused websocket from Origin %r", head.headers.get("origin"))
                await request.respond(403, b"foreign Origin refused")
                return
            await self._websocket(request)
            return
        if head.path == METRICS_PATH:
            body, content_type = await self.metrics(head.headers.get("accept"))
            await request.respond(200, body, content_type=content_type)
            return
        asset = ASSETS.get(head.path)
        if asset is None:
            await request.respond(404, b"not found")
            return
        name, content_type = asset
        host = head.headers.get("host", f"127.0.0.1:{self.gate.port}")
        await request.respond(
            200,
            load_asset(name),
            content_type=content_type,
            extra=_security_headers(f"'self' ws://{host}"),
        )

    async def metrics(self, accept: str | None = None) -> tuple[bytes, str]:
        """Every followed queue's gauges in the Prometheus text format (one ``admin.stats``
        read each, at scrape time; docs/observability.md). No token: counts only."""
        stats: list[admin.QueueStats] = []
        ok = True
        with trio.move_on_after(METRICS_TIMEOUT) as scope:
            try:
                for queue in list(self.hub.queues):
                    stats.append(await admin.stats(self.hub.conn, queue))
            except EchoMQError as exc:
                log.warning("metrics: queue gauges not read (%s)", exc)
                ok = False
        registry = CollectorRegistry(auto_describe=False)
        families = queue_families(stats, ok and not scope.cancelled_caught)
        registry.register(_Families(families))
        return render(registry, accept)

    async def _websocket(self, request: Request) -> None:
        async with trio.open_nursery() as nursery:
            ws: trio_websocket.WebSocketConnection | None = None
            with trio.move_on_after(HANDSHAKE_TIMEOUT):
                handshake = await trio_websocket.wrap_server_stream(
                    nursery, request.replay(), max_message_size=MAX_WS_MESSAGE
                )
                ws = await handshake.accept()
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
                        archive=self.archive.display if self.archive is not None else None,
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
                await ws.send_message(encode(refusal(exc)))
                continue
            await ws.send_message(encode(await self._answer_one(request)))

    async def _answer_one(
        self, request: AuthRequest | CommandRequest | LogsRequest | HistoryRequest | FlowRequest
    ) -> dict[str, Any]:
        """The answer to one request; a failure no refusal foresaw is logged and answered
        ``internal`` (rule 4): the connection and the server go on."""
        try:
            return await self._answer(request)
        except Exception:
            log.exception("answering a %s request failed", type(request).__name__)
            ref = -1 if isinstance(request, AuthRequest) else request.ref
            error = "the dashboard failed to answer (logged on the server)"
            return result_reply(ref, ok=False, error=error, kind="internal")

    async def _answer(
        self,
        request: AuthRequest | CommandRequest | LogsRequest | HistoryRequest | FlowRequest,
    ) -> dict[str, Any]:
        if isinstance(request, AuthRequest):
            return auth_reply(token_matches(self.token, request.token))
        if isinstance(request, FlowRequest):
            return await self._flow(request)
        if isinstance(request, HistoryRequest):
            return await self._history(request)
        if isinstance(request, LogsRequest):
            if request.queue not in self.hub.queues:
                error = not_shown(request.queue)
                return result_reply(request.ref, ok=False, error=error, kind="unknown_queue")
            try:
                lines = await jobs.get_job_logs(self.hub.conn, request.queue, request.job)
            except EchoMQError as exc:
                return result_reply(request.ref, ok=False, error=str(exc), kind=_kind(exc))
            return result_reply(request.ref, ok=True, value=lines)
        try:
            value = await run_command(self.hub.conn, request, self.token, self.hub.queues)
        except CommandRefused as exc:
            log.warning("refused %s on %s: %s", request.action, request.queue, exc)
            return result_reply(request.ref, ok=False, error=str(exc), kind=exc.kind)
        except EchoMQError as exc:
            return result_reply(request.ref, ok=False, error=str(exc), kind=_kind(exc))
        log.info("%s %s %s -> %r", request.action, request.queue, request.job or "", value)
        self.hub.poll_soon()
        return result_reply(request.ref, ok=True, value=value)

    async def _flow(self, request: FlowRequest) -> dict[str, Any]:
        """The flow panel's waiting parents and tree (read-only: no token needed)."""
        if request.queue not in self.hub.queues:
            error = not_shown(request.queue)
            return result_reply(request.ref, ok=False, error=error, kind="unknown_queue")
        try:
            value = await read_flow(self.hub.conn, request.queue, request.job)
        except EchoMQError as exc:
            return result_reply(request.ref, ok=False, error=str(exc), kind=_kind(exc))
        return result_reply(request.ref, ok=True, value=value)

    async def _history(self, request: HistoryRequest) -> dict[str, Any]:
        """A page of the archive for the history panel (read-only: no token needed)."""
        if self.archive is None:
            error = "this dashboard was started without an archive (--archive URL)"
            return result_reply(request.ref, ok=False, error=error, kind="no_archive")
        if request.queue not in self.hub.queues:
            error = not_shown(request.queue)
            return result_reply(request.ref, ok=False, error=error, kind="unknown_queue")
        try:
            value = await self.archive.page(request)
        except EchoMQError as exc:
            return result_reply(request.ref, ok=False, error=str(exc), kind=_kind(exc))
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
    allowed_hosts: Sequence[str] = (),
    archive: str | None = None,
    task_status: trio.TaskStatus[DashboardInfo] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the live dashboard until cancelled.

    Args:
        url_or_conn: a redis URL, a ``ConnectionConfig``, or an open ``Connection`` (its
            settings are used for the pub/sub connection too).
        host, port: where to listen; loopback and a free port by default. Any other
            address needs ``allowed_hosts`` (and logs a warning: anyone who reaches the
            port reads every queue's payloads).
        token: the operator token (8..256 of ``[A-Za-z0-9._~-]``); a random one when None
            (read it from the answered :class:`DashboardInfo`).
        queues: the queues to show; all queues found in Redis (rescanned) when None.
            Commands and log reads reach only the queues shown.
        interval: seconds between two polls of the counts.
        history: throughput points kept per queue (one per poll).
        allowed_hosts: host names (or addresses) browsers may use besides loopback, e.g.
            ``["dash.example.com"]``; requests naming another ``Host`` get 421.
        archive: the durable archive's URL (``sqlite:///...``, ``postgresql://...``,
            docs/results.md): the page gets a history panel that reads it, paged, newest
            first. None: no panel.

    Raises:
        InvalidKey: a bad queue name, before any I/O.
        InvalidArgument: a bad port, token, interval, history or allowed host, or a
            non-loopback ``host`` without ``allowed_hosts``.
    """
    names, token, allowed = check_options(
        host=host, port=port, token=token, queues=queues, allowed_hosts=allowed_hosts
    )
    if not interval > 0 or not 1 <= history <= 10_000:
        raise InvalidArgument("interval must be > 0 and history in 1..10000")
    source = ArchiveSource(check_archive_url(archive)) if archive is not None else None
    if not is_loopback(host):
        log.warning(exposed_warning(host, allowed))
    token = token or secrets.token_urlsafe(18)
    async with _connection(url_or_conn) as conn:
        hub = Hub(conn, conn.config, queues=names, interval=interval, history=history)
        async with trio.open_nursery() as nursery:
            await nursery.start(hub.run)  # first: Redis unreachable fails before we listen
            if source is not None:
                await nursery.start(source.serve)
            listeners = await trio.open_tcp_listeners(port, host=host)
            for extra in listeners[1:]:
                await extra.aclose()  # one address family is enough; its port is the one shown
            listener = listeners[0]
            bound_port: int = listener.socket.getsockname()[1]
            gate = Gate(bind_host=host, port=bound_port, allowed=allowed)
            server = _Server(hub=hub, gate=gate, token=token, archive=source)
            await nursery.start(
                partial(
                    serve_http, server.handle, [listener], hosts=gate.hosts, log=log, gone=_WS_GONE
                )
            )
            task_status.started(DashboardInfo(host=host, port=bound_port, token=token))


def check_options(
    *,
    host: str,
    port: object,
    token: object,
    queues: Sequence[str] | None,
    allowed_hosts: Sequence[str],
) -> tuple[list[str] | None, str | None, frozenset[str]]:
    """Gate the dashboard's options before any I/O: (queue names, token, allowed hosts).

    Raises:
        InvalidKey: a bad queue name.
        InvalidArgument: a bad port, token or allowed host; a ``host`` that is no address
            (``999.1.1.1``); a non-loopback ``host`` with no ``allowed_hosts``.
    """
    check_port(port)
    names = [check_queue(q) for q in queues] if queues is not None else None
    checked = check_token(token) if token is not None else None
    if isinstance(allowed_hosts, str):
        raise InvalidArgument("allowed_hosts must be a list of host names, not a str")
    allowed = frozenset(check_allowed_host(name) for name in allowed_hosts)
    if not isinstance(host, str):
        raise InvalidArgument(f"host must be a str, not {host!r}")
    check_bind_host("host", host)
    if not is_loopback(host) and not allowed:
        where = "every interface" if host in WILDCARDS else host
        raise InvalidArgument(
            f"binding {where} exposes the dashboard beyond this machine: give each host "
            "name browsers will use with --allow-host NAME (allowed_hosts=[...] in code); "
            "requests naming any other Host are refused"
        )
    return names, checked, allowed


def exposed_warning(host: str, allowed: frozenset[str]) -> str:
    where = "every interface" if host in WILDCARDS else host
    return (
        f"the dashboard listens on {where}, not loopback: anyone who can reach the port "
        f"reads every payload it shows (operator commands still need the token); "
        f"Host names allowed: {', '.join(sorted(allowed))}. Put it behind TLS."
    )


async def _serve_until_signal(url: str, **options: Any) -> None:
    """Serve (with a private redis-server for ``embedded://``) until SIGINT or SIGTERM."""
    from .._testkit.redis_server import open_redis_server

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
    allowed_hosts: Sequence[str] = (),
    archive: str | None = None,
) -> int:
    """Serve the dashboard until Ctrl-C (the CLI's ``echomq dashboard``); answer an exit code.

    ``url`` None means ``$ECHOMQ_URL``, else the default local Redis; ``embedded://``
    starts a private redis-server for the session.

    Raises:
        InvalidKey, InvalidArgument: a bad option (:func:`check_options`), before anything
            starts (the CLI exits 2).
    """
    url = resolve_url(url)
    port = 8000 if port is None else port
    queues = list(queues) if queues else None
    _, _, allowed = check_options(
        host=host, port=port, token=token, queues=queues, allowed_hosts=allowed_hosts
    )
    if archive is not None:
        check_archive_url(archive)
    resolve_bind_host("host", host)  # a name that does not resolve: one line, exit 2
    if not is_loopback(host):
        print(f"echomq dashboard: warning: {exposed_warning(host, allowed)}", file=sys.stderr)
    options = {
        "host": host,
        "port": port,
        "token": token,
        "queues": queues,
        "allowed_hosts": sorted(allowed),
        "archive": archive,
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
