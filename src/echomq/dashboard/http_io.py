"""A minimal HTTP/1.1 responder for the page and its assets, on the websocket's port.

Rule 1: one request per connection. The request head is read whole (at most
``MAX_HEAD`` bytes, within ``HEAD_TIMEOUT`` seconds) and parsed strictly; anything odd is
a 400 and the connection closes. Only GET and HEAD of a fixed set of names are served.
Rule 2: a websocket upgrade is not answered here: its head, and any bytes read after it,
are handed to trio-websocket in a :class:`ReplayStream`, which reads them back first.
Rule 3: every response carries a strict Content-Security-Policy (same-origin scripts and
styles only, no framing) and ``Connection: close``.
"""

from __future__ import annotations

import importlib.resources
import re

import attrs
import trio

__all__ = [
    "ASSETS",
    "BadRequest",
    "Head",
    "ReplayStream",
    "load_asset",
    "read_head",
    "respond",
]

MAX_HEAD = 16 * 1024
HEAD_TIMEOUT = 10.0
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_REQUEST_LINE = re.compile(r"([A-Z]+) (\S+) HTTP/(1\.[01])")

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
    """A parsed request head. Header names are lower case; repeats are comma-joined."""

    method: str
    target: str
    version: str
    headers: dict[str, str]

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


def parse_head(data: bytes) -> Head:
    """Parse the bytes before the blank line (request line and header lines)."""
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise BadRequest(400, "request head is not ASCII") from None
    lines = text.split("\r\n")
    match = _REQUEST_LINE.fullmatch(lines[0])
    if match is None:
        raise BadRequest(400, "bad request line")
    method, target, version = match.groups()
    if not target.startswith("/"):
        raise BadRequest(400, "only origin-form targets are served")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or _TOKEN.fullmatch(name) is None:
            raise BadRequest(400, "bad header line")
        key = name.lower()
        value = value.strip(" \t")
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    if version == "1.1" and "host" not in headers:
        raise BadRequest(400, "HTTP/1.1 needs a Host header")
    return Head(method=method, target=target, version=version, headers=headers)


async def read_head(stream: trio.abc.ReceiveStream) -> tuple[Head, bytes, bytes]:
    """Read one request head: ``(head, raw head bytes, bytes read after it)``.

    Raises:
        BadRequest: malformed (400), larger than ``MAX_HEAD`` (431), too slow (408), or
            the peer closed before a whole head arrived (400).
    """
    buffer = bytearray()
    with trio.move_on_after(HEAD_TIMEOUT) as scope:
        while (end := buffer.find(b"\r\n\r\n")) < 0:
            if len(buffer) > MAX_HEAD:
                raise BadRequest(431, "request head too large")
            chunk = await stream.receive_some(4096)
            if not chunk:
                raise BadRequest(400, "connection closed before the request head ended")
            buffer += chunk
    if scope.cancelled_caught:
        raise BadRequest(408, "request head too slow")
    if end > MAX_HEAD:
        raise BadRequest(431, "request head too large")
    raw = bytes(buffer[: end + 4])
    return parse_head(bytes(buffer[:end])), raw, bytes(buffer[end + 4 :])


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
    head_only: bool = False,
    extra: list[tuple[str, str]] | None = None,
) -> None:
    """Write a whole response and nothing more (the caller closes the connection)."""
    lines = [
        f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
        "Cache-Control: no-store",
        "Connection: close",
        *(f"{name}: {value}" for name, value in extra or ()),
    ]
    if status == 405:
        lines.append("Allow: GET, HEAD")
    data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    await stream.send_all(data if head_only else data + body)


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
