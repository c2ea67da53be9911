"""HTTP/1.1 for the page and its assets, on the websocket's port, spoken with ``h11``.

Rule 1: one request per connection. The request head is read by an ``h11.Connection``
(at most ``MAX_HEAD`` bytes, within ``HEAD_TIMEOUT`` seconds); what h11 refuses is a 400
(431 when too large, 408 when too slow) and the connection closes. On top of h11, only
origin-form targets (``/path``) are served and a folded header line is refused. Only
GET and HEAD of a fixed set of names are served.
Rule 2: a websocket upgrade is not answered here: its head, and any bytes read after it,
are handed to trio-websocket in a :class:`ReplayStream`, which reads them back first.
Rule 3: every response (written by h11, which frames it and knows a HEAD has no body)
carries a strict Content-Security-Policy (same-origin scripts and styles only, no
framing) and ``Connection: close``.
"""

from __future__ import annotations

import importlib.resources

import attrs
import h11
import trio

__all__ = [
    "ASSETS",
    "BadRequest",
    "Head",
    "ReplayStream",
    "load_asset",
    "parse_head",
    "read_head",
    "respond",
]

MAX_HEAD = 16 * 1024
HEAD_TIMEOUT = 10.0
_RECEIVE = 4096

#: URL path -> (file under static/, content type)
ASSETS: dict[str, tuple[str, str]] = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
    "/favicon.svg": ("favicon.svg", "image/svg+xml"),
}

REASONS = {
    200: "OK",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    421: "Misdirected Request",
    431: "Request Header Fields Too Large",
}


class BadRequest(Exception):
    """The request head is malformed, too large or too slow; carries the status to answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


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


def _exchange() -> h11.Connection:
    return h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)


def _next_event(conn: h11.Connection) -> object:
    try:
        return conn.next_event()
    except h11.RemoteProtocolError as exc:
        raise BadRequest(exc.error_status_hint, f"bad request: {exc}") from None


def _head(request: h11.Request, raw: bytes, conn: h11.Connection) -> Head:
    """Our view of h11's request, with the rules h11 leaves to us (Rule 1)."""
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
        method=request.method.decode("ascii"),
        target=target,
        version=request.http_version.decode("ascii"),
        headers=headers,
        exchange=conn,
    )


def parse_head(data: bytes) -> Head:
    """Parse the bytes before the blank line (request line and header lines).

    Raises:
        BadRequest: what h11 refuses (400), or the rules of Rule 1.
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
            conn.receive_data(bytes(chunk))  # b"" marks the end of the stream
    if scope.cancelled_caught:
        raise BadRequest(408, "request head too slow")
    assert isinstance(event, h11.Request)
    rest = bytes(conn.trailing_data[0])
    raw = bytes(received[: len(received) - len(rest)])
    if len(raw) > MAX_HEAD + 4:
        raise BadRequest(431, "request head too large")
    return _head(event, raw, conn), raw, rest


def security_headers(connect_src: str) -> list[tuple[str, str]]:
    csp = (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        f"connect-src {connect_src}; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    )
    return [
        ("Content-Security-Policy", csp),
        ("X-Content-Type-Options", "nosniff"),
        ("X-Frame-Options", "DENY"),
        ("Referrer-Policy", "no-referrer"),
        ("Cross-Origin-Resource-Policy", "same-origin"),
    ]


async def respond(
    stream: trio.abc.SendStream,
    status: int,
    body: bytes,
    *,
    content_type: str = "text/plain; charset=utf-8",
    head: Head | None = None,
    extra: list[tuple[str, str]] | None = None,
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
        *(extra or ()),
    ]
    if status == 405:
        headers.append(("Allow", "GET, HEAD"))
    reason = REASONS.get(status, "Error").encode()
    data = conn.send(h11.Response(status_code=status, headers=headers, reason=reason)) or b""
    if head is None or head.method != "HEAD":
        data += conn.send(h11.Data(data=body)) or b""
    data += conn.send(h11.EndOfMessage()) or b""
    await stream.send_all(data)


def load_asset(name: str) -> bytes:
    """The bytes of a file under ``static/`` (package data)."""
    return (importlib.resources.files(__package__) / "static" / name).read_bytes()


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
