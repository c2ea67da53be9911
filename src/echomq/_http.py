"""One small HTTP/1.1 server, spoken with ``h11``: the dashboard's page and a worker's
``/metrics`` (docs/dashboard.md, "The HTTP side"; docs/observability.md).

Rule 1: one request per connection. The head is read by an ``h11.Connection`` (at most
``MAX_HEAD`` bytes, within ``HEAD_TIMEOUT`` seconds); what h11 refuses is a 400 (431 when
too large, 408 when too slow). On top of h11: only origin-form targets (``/path``), no
folded header line, only ``GET`` and ``HEAD`` (405), and no request body (413: nothing
here reads one).
Rule 2: the Host check is never off. A page on an attacker's name, its DNS answer rebound
to this address, would read this server as its own origin; so a request whose ``Host``
names no allowed host gets 421 before any handler runs (:class:`HostRule`).
Rule 3: one connection's failure is that connection's. Whatever a handler raises (but
cancellation) is logged once, with its traceback, and the connection is closed; the
server goes on serving the others. A peer that goes away (reset, broken pipe) is not
logged.
Rule 4: every response (framed by h11: a HEAD gets no body) carries ``Content-Length``,
``Cache-Control: no-store`` and ``Connection: close``. After it the server stops writing
and reads what the peer still sends (at most ``LINGER_BYTES``, for ``LINGER`` seconds)
before it closes: a client still sending when it is refused reads the answer, not a
reset.
Rule 5: a websocket upgrade is not answered here: the handler hands the stream on with
:meth:`Request.replay`, which gives back the bytes already read first.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Awaitable, Callable, Sequence

import attrs
import h11
import trio

from .errors import InvalidArgument

__all__ = [
    "BadRequest",
    "HostRule",
    "Head",
    "LOOPBACK_NAMES",
    "MAX_HEAD",
    "ReplayStream",
    "Request",
    "WILDCARDS",
    "check_allowed_host",
    "handle_connection",
    "host_name",
    "is_loopback",
    "parse_head",
    "read_head",
    "respond",
    "serve_http",
]

MAX_HEAD = 16 * 1024
HEAD_TIMEOUT = 10.0
CLOSE_TIMEOUT = 2.0
LINGER = 1.0
LINGER_BYTES = 64 * 1024
METHODS = ("GET", "HEAD")
_RECEIVE = 4096
_BLANK_LINE = re.compile(rb"\n\r?\n")  # where a head ends (h11 reads bare LF lines too)

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "[::1]"})
WILDCARDS = frozenset({"", "0.0.0.0", "::"})
_LABEL = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
_HOST_NAME = re.compile(rf"{_LABEL}(\.{_LABEL})*\.?")

#: what a peer going away looks like: not logged (rule 3)
GONE: tuple[type[Exception], ...] = (
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    OSError,
)

REASONS = {
    200: "OK",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    413: "Content Too Large",
    421: "Misdirected Request",
    431: "Request Header Fields Too Large",
}


class BadRequest(Exception):
    """The request head is malformed, too large or too slow; carries the status to answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def host_name(host_header: str) -> str:
    """``Host: host:port`` -> ``host``, lower case (an IPv6 address kept in brackets)."""
    text = host_header.strip().lower()
    if text.startswith("["):
        return text.split("]", 1)[0] + "]"
    return text.rsplit(":", 1)[0] if ":" in text else text


def is_loopback(host: str) -> bool:
    """``localhost``, ``127.x.x.x`` or ``::1``: only this machine can connect."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _is_address(name: str) -> bool:
    """An IPv4 address, or an IPv6 one in brackets (as a ``Host`` names them)."""
    bracketed = name.startswith("[") and name.endswith("]")
    try:
        address = ipaddress.ip_address(name[1:-1] if bracketed else name)
    except ValueError:
        return False
    return (address.version == 6) == bracketed


def check_allowed_host(name: object) -> str:
    """A host name or address a client may name in ``Host``, lower case (an IPv6 address
    in brackets); anything else (``*``, a URL, a port) is InvalidArgument."""
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"an allowed host must be a host name or address, not {name!r}")
    text = name.lower()
    try:
        address = ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        if not _HOST_NAME.fullmatch(text) or len(text) > 253:
            raise InvalidArgument(
                f"{name!r} is not a host name or address (no scheme, port or wildcard: "
                "the Host check is never off)"
            ) from None
        return text.rstrip(".")
    return f"[{address}]" if address.version == 6 else str(address)


@attrs.frozen(kw_only=True)
class HostRule:
    """Which ``Host`` values a server answers (rule 2): the loopback names, the address it
    is bound to (unless a wildcard), and the ``allowed`` names (:func:`check_allowed_host`
    forms). ``any_address``: any IP address passes too (a DNS rebinding always names a
    host, never an address): for a port bound to every interface that scrapers reach by
    address. A request without ``Host`` (HTTP/1.0; no browser sends one) passes.
    """

    bind_host: str
    allowed: frozenset[str] = frozenset()
    any_address: bool = False

    @property
    def own_names(self) -> frozenset[str]:
        if self.bind_host in WILDCARDS:
            return LOOPBACK_NAMES
        bound = f"[{self.bind_host}]" if ":" in self.bind_host else self.bind_host.lower()
        return LOOPBACK_NAMES | {bound}

    @property
    def names(self) -> frozenset[str]:
        return self.own_names | self.allowed

    def allows(self, host: str | None) -> bool:
        if host is None:
            return True
        name = host_name(host)
        return name in self.names or (self.any_address and _is_address(name))


@attrs.frozen(kw_only=True)
class Head:
    """A parsed request head. Header names are lower case; repeats are comma-joined.

    ``exchange``: the h11 connection that read it (a response to it is framed by it: a
    HEAD request gets no body).
    """

    method: str
    target: str
    version: str
    headers: dict[str, str]
    exchange: h11.Connection | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]

    @property
    def host(self) -> str | None:
        return self.headers.get("host")

    def tokens(self, name: str) -> set[str]:
        """The comma-separated tokens of a header, lower case."""
        return {t.strip().lower() for t in self.headers.get(name, "").split(",") if t.strip()}

    @property
    def is_websocket(self) -> bool:
        return (
            self.method == "GET"
            and "upgrade" in self.tokens("connection")
            and "websocket" in self.tokens("upgrade")
        )

    @property
    def has_body(self) -> bool:
        """The request announces a body (a length other than 0, or a transfer coding)."""
        length = self.headers.get("content-length", "0").strip()
        return "transfer-encoding" in self.headers or length != "0"


def _exchange() -> h11.Connection:
    return h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)


def _next_event(conn: h11.Connection) -> object:
    try:
        return conn.next_event()
    except h11.RemoteProtocolError as exc:
        raise BadRequest(exc.error_status_hint, f"bad request: {exc}") from None


def _head(request: h11.Request, raw: bytes, conn: h11.Connection) -> Head:
    """Our view of h11's request, with the rules h11 leaves to us (rule 1)."""
    if b"\r\n " in raw or b"\r\n\t" in raw:
        raise BadRequest(400, "folded header lines are refused")
    target = request.target.decode("ascii", "replace")
    if not target.startswith("/"):
        raise BadRequest(400, "only origin-form targets are served")
    headers: dict[str, str] = {}
    for name, value in request.headers:
        key, text = name.decode("latin-1"), value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return Head(
        method=request.method.decode("ascii", "replace"),
        target=target,
        version=request.http_version.decode("ascii", "replace"),
        headers=headers,
        exchange=conn,
    )


def parse_head(data: bytes) -> Head:
    """Parse the bytes before the blank line (request line and header lines).

    Raises:
        BadRequest: what h11 refuses (400), or the rules of rule 1.
    """
    conn = _exchange()
    conn.receive_data(data + b"\r\n\r\n")
    event = _next_event(conn)
    if not isinstance(event, h11.Request):
        raise BadRequest(400, "no request head")
    return _head(event, data, conn)


async def read_head(stream: trio.abc.ReceiveStream) -> tuple[Head, bytes, bytes]:
    """Read one request head: ``(head, raw head bytes, bytes read after it)``.

    Raises:
        BadRequest: malformed (400), larger than ``MAX_HEAD`` (431), too slow (408), or
            the peer closed before a whole head arrived (400).
    """
    conn = _exchange()
    received = bytearray()
    event: object = None
    with trio.move_on_after(HEAD_TIMEOUT) as scope:
        while not isinstance(event := _next_event(conn), h11.Request):
            if event is not h11.NEED_DATA:
                raise BadRequest(400, "connection closed before the request head ended")
            chunk = await stream.receive_some(_RECEIVE)
            received += chunk
            _check_size(received)
            conn.receive_data(bytes(chunk))  # b"" marks the end of the stream
    if scope.cancelled_caught:
        raise BadRequest(408, "request head too slow")
    assert isinstance(event, h11.Request)
    rest = bytes(conn.trailing_data[0])
    raw = bytes(received[: len(received) - len(rest)])
    return _head(event, raw, conn), raw, rest


def _check_size(received: bytearray) -> None:
    """A head (to its blank line) longer than ``MAX_HEAD`` is 431, before h11 sees it:
    whatever else is wrong with it, and however its bytes were cut."""
    end = _BLANK_LINE.search(received)
    if (end.end() if end else len(received)) > MAX_HEAD:
        raise BadRequest(431, "request head too large")


async def respond(
    stream: trio.abc.SendStream,
    status: int,
    body: bytes,
    *,
    content_type: str = "text/plain; charset=utf-8",
    head: Head | None = None,
    extra: Sequence[tuple[str, str]] = (),
) -> None:
    """Write a whole response and nothing more (the caller closes the connection).

    ``head``: the request answered, when one was read (h11 then frames the answer for it:
    no body for HEAD); without it (a refused head) a fresh h11 connection writes it.
    """
    conn = head.exchange if head is not None and head.exchange is not None else None
    if conn is None or conn.our_state is not h11.SEND_RESPONSE:
        conn = h11.Connection(h11.SERVER)
    headers = [
        ("Content-Type", content_type),
        ("Content-Length", str(len(body))),
        ("Cache-Control", "no-store"),
        ("Connection", "close"),
        *extra,
    ]
    if status == 405:
        headers.append(("Allow", ", ".join(METHODS)))
    reason = REASONS.get(status, "Error").encode()
    data = conn.send(h11.Response(status_code=status, headers=headers, reason=reason)) or b""
    if head is None or head.method != "HEAD":
        data += conn.send(h11.Data(data=body)) or b""
    data += conn.send(h11.EndOfMessage()) or b""
    await stream.send_all(data)


class ReplayStream(trio.abc.Stream):
    """A stream that first gives back bytes already read from the one it wraps."""

    def __init__(self, stream: trio.abc.Stream, prefix: bytes) -> None:
        self.stream = stream
        self._prefix = prefix

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._prefix:
            size = len(self._prefix) if max_bytes is None else max_bytes
            data, self._prefix = self._prefix[:size], self._prefix[size:]
            await trio.lowlevel.checkpoint()
            return data
        return bytes(await self.stream.receive_some(max_bytes))

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self.stream.aclose()


@attrs.define(eq=False)
class Request:
    """One request past the checks of rules 1 and 2, for a handler to answer once."""

    head: Head
    stream: trio.SocketStream
    read: bytes  # every byte read from the stream so far: the head and what followed it
    replayed: bool = False

    async def respond(
        self,
        status: int,
        body: bytes,
        *,
        content_type: str = "text/plain; charset=utf-8",
        extra: Sequence[tuple[str, str]] = (),
    ) -> None:
        await respond(
            self.stream, status, body, content_type=content_type, head=self.head, extra=extra
        )

    def replay(self) -> ReplayStream:
        """The stream, to hand on whole (a websocket upgrade): it reads ``read`` first."""
        self.replayed = True
        return ReplayStream(self.stream, self.read)


Handler = Callable[[Request], Awaitable[None]]


async def _exchange_one(stream: trio.SocketStream, handler: Handler, hosts: HostRule) -> bool:
    """Read, check and answer one request; True when the stream was not handed on."""
    try:
        head, raw, rest = await read_head(stream)
    except BadRequest as exc:
        await respond(stream, exc.status, str(exc).encode())
        return True
    if not hosts.allows(head.host):
        await respond(stream, 421, b"unknown Host: use 127.0.0.1 or localhost", head=head)
        return True
    if head.method not in METHODS:
        await respond(stream, 405, b"method not allowed", head=head)
        return True
    if head.has_body:
        await respond(stream, 413, b"this server reads no request body", head=head)
        return True
    request = Request(head=head, stream=stream, read=raw + rest)
    await handler(request)
    return not request.replayed


async def _linger(stream: trio.SocketStream) -> None:
    """Rule 4: stop writing, read what the peer still sends (bounded), then close."""
    with trio.move_on_after(LINGER):
        try:
            await stream.send_eof()
            left = LINGER_BYTES
            while left > 0 and (data := await stream.receive_some(_RECEIVE)):
                left -= len(data)
        except GONE:
            pass


async def handle_connection(
    stream: trio.SocketStream,
    handler: Handler,
    *,
    hosts: HostRule,
    log: logging.Logger,
    gone: tuple[type[Exception], ...] = (),
) -> None:
    """Serve one connection (rules 1 to 4): no exception but cancellation leaves it.

    ``gone``: more exception types that mean the peer went away (not logged).
    """
    answered = False
    try:
        answered = await _exchange_one(stream, handler, hosts)
    except* (*GONE, *gone):
        pass  # the peer went away: nothing to say about it
    except* Exception as group:
        log.error("a connection failed; the server serves on", exc_info=group)
    finally:
        with trio.move_on_after(CLOSE_TIMEOUT) as scope:
            scope.shield = True
            if answered:
                await _linger(stream)
            await stream.aclose()


async def serve_http(
    handler: Handler,
    listeners: Sequence[trio.SocketListener],
    *,
    hosts: HostRule,
    log: logging.Logger,
    gone: tuple[type[Exception], ...] = (),
    task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``handler`` on ``listeners`` until cancelled, one request per connection
    (:func:`handle_connection`); ``started`` once they accept."""

    async def connection(stream: trio.SocketStream) -> None:
        await handle_connection(stream, handler, hosts=hosts, log=log, gone=gone)

    await trio.serve_listeners(connection, list(listeners), task_status=task_status)
