"""What the dashboard exposes, and to whom: the Host check is never off (DNS rebinding),
a non-loopback bind needs an explicit list of allowed host names, and reads and commands
reach only the queues it shows."""

from __future__ import annotations

from functools import partial

import pytest
import trio
import trio_websocket

import echomq
from echomq import admin, jobs
from echomq.dashboard import DashboardInfo, serve_dashboard
from echomq.dashboard.http_io import parse_head
from echomq.dashboard.server import Gate
from echomq.errors import InvalidArgument, InvalidKey

from ._client import Client, ws_url
from .conftest import TOKEN, payload
from .test_http import get, raw_request


def _head(host: str, origin: str | None = None) -> object:
    extra = f"Origin: {origin}\r\n" if origin else ""
    return parse_head(f"GET /ws HTTP/1.1\r\nHost: {host}\r\n{extra}".encode()[:-2])


def test_a_wildcard_bind_still_checks_the_host() -> None:
    """Bound to 0.0.0.0, only loopback names and the allowed ones pass (before: any Host,
    so a rebound DNS name read every payload)."""
    gate = Gate(bind_host="0.0.0.0", port=8000, allowed=frozenset({"dash.example.com"}))
    for ok in ("127.0.0.1:8000", "localhost:8000", "dash.example.com", "DASH.example.com:443"):
        assert gate.host_ok(_head(ok)), ok  # type: ignore[arg-type]
    for bad in ("evil.example:8000", "attacker.example", "0.0.0.0:8000", "10.1.2.3:8000"):
        assert not gate.host_ok(_head(bad)), bad  # type: ignore[arg-type]


def test_allowed_names_pass_the_origin_check_on_any_port_and_scheme() -> None:
    """A reverse proxy in front: https://dash.example.com is the page's origin."""
    gate = Gate(bind_host="0.0.0.0", port=8000, allowed=frozenset({"dash.example.com"}))
    for ok in ("https://dash.example.com", "http://dash.example.com:8000", None):
        assert gate.origin_ok(_head("dash.example.com", ok)), ok  # type: ignore[arg-type]
    for bad in (
        "http://evil.example",
        "http://evil.example:8000",
        "null",
        "ftp://dash.example.com",
    ):
        assert not gate.origin_ok(_head("evil.example:8000", bad)), bad  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"port": 99999}, InvalidArgument),
        ({"port": -1}, InvalidArgument),
        ({"host": "0.0.0.0"}, InvalidArgument),
        ({"host": "192.0.2.10"}, InvalidArgument),
        ({"host": "0.0.0.0", "allowed_hosts": ["*"]}, InvalidArgument),
        ({"host": "0.0.0.0", "allowed_hosts": ["http://dash.example.com"]}, InvalidArgument),
        ({"host": "0.0.0.0", "allowed_hosts": "dash.example.com"}, InvalidArgument),
        ({"token": "short"}, InvalidArgument),
        ({"token": "has a space in it"}, InvalidArgument),
        ({"queues": ["bad name!"]}, InvalidKey),
    ],
)
async def test_bad_options_raise_before_any_io(
    closed_port_url: str, options: dict[str, object], error: type[Exception]
) -> None:
    with pytest.raises(error):
        await serve_dashboard(closed_port_url, **options)  # type: ignore[arg-type]


async def test_a_wildcard_bind_with_allowed_hosts_serves_only_those(
    nursery: trio.Nursery, conn: echomq.Connection, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    info: DashboardInfo = await nursery.start(
        partial(
            serve_dashboard,
            conn,
            host="0.0.0.0",
            queues=[queue],
            allowed_hosts=["dash.example.com"],
            interval=0.1,
        )
    )
    assert "not loopback" in caplog.text and "dash.example.com" in caplog.text
    assert (await raw_request(info.port, get("/", f"evil.example:{info.port}")))[0] == 421
    assert (await raw_request(info.port, get("/", "dash.example.com")))[0] == 200
    assert (await raw_request(info.port, get("/", f"127.0.0.1:{info.port}")))[0] == 200


async def test_logs_are_read_only_for_the_queues_shown(
    dashboard: DashboardInfo, conn: echomq.Connection, queue: str
) -> None:
    """A logs request for a queue this dashboard does not show is refused (before: any
    queue's log lines, by name, to whoever reached the port)."""
    other = f"{queue}-other"
    job_id = await jobs.enqueue(conn, other, payload())
    await jobs.add_log(conn, other, job_id, "secret line")
    async with trio_websocket.open_websocket_url(ws_url(dashboard)) as ws:
        client = Client(ws)
        await client.send(type="logs", ref=3, queue=other, job=job_id)
        result = await client.next("result", lambda m: m["ref"] == 3)
        assert (result["ok"], result["kind"]) == (False, "unknown_queue")
        assert "secret line" not in str(result)
        mine = await jobs.enqueue(conn, queue, payload())
        await jobs.add_log(conn, queue, mine, "mine")
        await client.send(type="logs", ref=4, queue=queue, job=mine)
        assert (await client.next("result", lambda m: m["ref"] == 4))["value"] == ["mine"]


async def test_commands_reach_only_the_queues_shown(
    dashboard: DashboardInfo, conn: echomq.Connection, queue: str
) -> None:
    other = f"{queue}-other"
    async with trio_websocket.open_websocket_url(ws_url(dashboard)) as ws:
        result = await Client(ws).command("pause", other, token=TOKEN)
    assert (result["ok"], result["kind"]) == (False, "unknown_queue")
    assert not await admin.is_paused(conn, other)
