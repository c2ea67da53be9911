"""The small HTTP responder: the page and its assets, and what it refuses."""

from __future__ import annotations

import trio

from echomq.dashboard import DashboardInfo
from echomq.dashboard.http_io import ASSETS, MAX_HEAD, load_asset


async def raw_request(port: int, data: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send raw bytes, read until the server closes; answer (status, headers, body)."""
    async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
        with trio.fail_after(5):
            await stream.send_all(data)
            reply = b""
            while chunk := await stream.receive_some(65536):
                reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.lower()] = value.strip()
    return int(lines[0].split()[1]), headers, body


def get(path: str, host: str = "127.0.0.1", method: str = "GET") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()


async def test_page_and_assets_are_served_from_the_package(dashboard: DashboardInfo) -> None:
    """/, /app.js, /style.css and the icon answer 200 with their bytes and content type."""
    for path, (name, content_type) in ASSETS.items():
        status, headers, body = await raw_request(dashboard.port, get(path))
        assert status == 200
        assert headers["content-type"] == content_type
        assert body == load_asset(name)
        assert int(headers["content-length"]) == len(body)


async def test_page_has_no_external_references(dashboard: DashboardInfo) -> None:
    """The page and its script name no other host: it works offline (no CDN)."""
    for name in ("index.html", "app.js", "style.css"):
        text = load_asset(name).decode()
        assert "http://" not in text and "https://" not in text and "//cdn" not in text


async def test_page_carries_a_strict_content_security_policy(dashboard: DashboardInfo) -> None:
    """Scripts and styles from this origin only, no framing, websocket to this host."""
    status, headers, _ = await raw_request(dashboard.port, get("/", f"127.0.0.1:{dashboard.port}"))
    assert status == 200
    csp = headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert f"ws://127.0.0.1:{dashboard.port}" in csp
    assert headers["x-frame-options"] == "DENY"
    assert headers["x-content-type-options"] == "nosniff"


async def test_head_answers_headers_without_a_body(dashboard: DashboardInfo) -> None:
    """HEAD / answers 200 with the length of the page and no body."""
    status, headers, body = await raw_request(dashboard.port, get("/", method="HEAD"))
    assert (status, body) == (200, b"")
    assert int(headers["content-length"]) == len(load_asset("index.html"))


async def test_unknown_paths_and_methods_are_refused(dashboard: DashboardInfo) -> None:
    """An unknown path is 404 (no traversal), another method is 405."""
    for path in ("/nope", "/../server.py", "/static/app.js", "/%2e%2e/x"):
        assert (await raw_request(dashboard.port, get(path)))[0] == 404
    status, headers, _ = await raw_request(dashboard.port, get("/", method="POST"))
    assert (status, headers["allow"]) == (405, "GET, HEAD")


async def test_malformed_requests_get_400(dashboard: DashboardInfo) -> None:
    """A garbled request line, a bad header line, no Host, or non-ASCII: 400."""
    for data in (
        b"HELLO\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nno colon here\r\n\r\n",
        b"GET / HTTP/1.1\r\n\r\n",
        "GET /é HTTP/1.1\r\nHost: x\r\n\r\n".encode(),
        b"GET http://127.0.0.1/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    ):
        assert (await raw_request(dashboard.port, data))[0] == 400


async def test_oversized_request_head_gets_431(dashboard: DashboardInfo) -> None:
    """A request head larger than the limit is refused."""
    data = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * (MAX_HEAD + 10) + b"\r\n\r\n"
    assert (await raw_request(dashboard.port, data))[0] == 431


async def test_foreign_host_header_gets_421(dashboard: DashboardInfo) -> None:
    """A Host that is not this loopback server (DNS rebinding) is refused."""
    status, _, _ = await raw_request(dashboard.port, get("/", f"evil.example:{dashboard.port}"))
    assert status == 421
    status, _, _ = await raw_request(dashboard.port, get("/", f"localhost:{dashboard.port}"))
    assert status == 200
