"""No message kills the dashboard: every refusal is typed and answered, the connection
stays (or closes cleanly), and the server serves the next browser.

The case that started it: ``"[" * 1000 + "]" * 1000`` on ``/ws`` ended the process with a
``RecursionError`` (json's decoder recursing); a job payload holding an escaped lone
surrogate (``"\\ud800"``) ended it at the first snapshot sent.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
import trio
import trio_websocket

import echomq
from echomq import _http, jobs
from echomq.dashboard import DashboardInfo
from echomq.dashboard.messages import (
    MAX_DEPTH,
    MAX_MESSAGE,
    REFUSALS,
    BadMessage,
    encode,
    nesting_depth,
    parse_request,
)
from echomq.dashboard.server import MAX_WS_MESSAGE

from ._client import Client, own_websocket, ws_url
from .conftest import TOKEN
from .test_http import get, raw_request


async def refused(dashboard: DashboardInfo, message: str | bytes) -> dict[str, Any]:
    """Send ``message``; answer its result, after checking the connection still works."""
    async with trio_websocket.open_websocket_url(ws_url(dashboard)) as ws:
        client = Client(ws)
        await ws.send_message(message)
        result = await client.next("result")
        await client.send(type="auth", token=TOKEN)
        assert (await client.next("auth"))["ok"] is True, "the connection must stay usable"
    return result


async def serves(dashboard: DashboardInfo) -> None:
    """A new browser gets the page and a hello: the server is up."""
    assert (await raw_request(dashboard.port, get("/")))[0] == 200
    async with trio_websocket.open_websocket_url(ws_url(dashboard)) as ws:
        assert (await Client(ws).next("hello"))["type"] == "hello"


async def test_the_nested_array_that_ended_the_process_is_refused(
    dashboard: DashboardInfo,
) -> None:
    """2,000 bytes of nested arrays: a too_deep refusal, no RecursionError."""
    result = await refused(dashboard, "[" * 1000 + "]" * 1000)
    assert (result["ok"], result["kind"], result["reason"]) == (False, "bad_message", "too_deep")
    assert result["ref"] == -1
    await serves(dashboard)


@pytest.mark.parametrize(
    ("message", "reason", "ref"),
    [
        ('{"type":"auth","token":"' + "x" * MAX_MESSAGE + '"}', "too_large", -1),
        ('{"type":"auth","token":"' + "é" * (MAX_MESSAGE // 2) + '"}', "too_large", -1),
        ('{"a":' * (MAX_DEPTH + 1) + "1" + "}" * (MAX_DEPTH + 1), "too_deep", -1),
        (b"\xff\xfe not utf-8", "not_utf8", -1),
        ('{"type":"auth","token":"\\ud800"}', "not_utf8", -1),
        ('{"type":"logs","ref":4,"queue":"q","job":"\\udfff"}', "not_utf8", 4),
        ('{"type":"auth","token"', "not_json", -1),
        ("NaN", "not_object", -1),
        ('[{"type":"auth","token":"t"}]', "not_object", -1),
        ('{"type":"shout","ref":2}', "unknown_type", 2),
        ('{"type":"command","ref":7,"action":"flushall","queue":"q"}', "unknown_action", 7),
        ('{"type":"command","ref":"7","action":"pause","queue":"q"}', "bad_field", -1),
        ('{"type":"command","ref":-1,"action":"pause","queue":"q"}', "bad_field", -1),
        ('{"type":"command","ref":9007199254740992,"action":"pause","queue":"q"}', "bad_field", -1),
        ('{"type":"history","ref":3,"queue":"q","limit":0}', "bad_field", 3),
        # found by the fuzz: a queue action given a job reached drain(conn, queue, job)
        (
            f'{{"type":"command","ref":8,"action":"drain","queue":"q","job":"x","token":"{TOKEN}"}}',
            "bad_field",
            8,
        ),
        ('{"type":"flow","ref":5,"queue":["q"]}', "bad_field", 5),
        ('{"type":"auth","token":null}', "bad_field", -1),
    ],
)
async def test_each_refusal_names_its_reason_and_the_ref_it_could_read(
    dashboard: DashboardInfo, message: str | bytes, reason: str, ref: int
) -> None:
    result = await refused(dashboard, message)
    assert (result["ok"], result["kind"], result["reason"], result["ref"]) == (
        False,
        "bad_message",
        reason,
        ref,
    )
    assert result["error"]


async def test_a_binary_message_holding_utf8_json_is_read(dashboard: DashboardInfo) -> None:
    async with trio_websocket.open_websocket_url(ws_url(dashboard)) as ws:
        client = Client(ws)
        await ws.send_message(json.dumps({"type": "auth", "token": TOKEN}).encode())
        assert (await client.next("auth"))["ok"] is True


async def test_commands_without_or_with_a_wrong_token_are_refused_typed(
    dashboard: DashboardInfo, queue: str
) -> None:
    async with trio_websocket.open_websocket_url(ws_url(dashboard)) as ws:
        client = Client(ws)
        for token in (None, "", "wrong-token-1", TOKEN + "x"):
            result = await client.command("pause", queue, token=token)
            assert (result["ok"], result["kind"]) == (False, "unauthorized")
        await client.send(type="auth", token="\u00e9" * 10)
        assert (await client.next("auth"))["ok"] is False


async def test_a_message_beyond_the_frame_limit_closes_cleanly(dashboard: DashboardInfo) -> None:
    """Longer than the websocket's limit: closed with 1009 (message too big); the server
    serves the next browser."""
    async with own_websocket(dashboard.port) as ws:
        await ws.send_message("x" * (MAX_WS_MESSAGE + 1))
        with trio.fail_after(5), pytest.raises(trio_websocket.ConnectionClosed) as closed:
            while True:
                await ws.get_message()
    assert closed.value.reason is not None and closed.value.reason.code == 1009
    await serves(dashboard)


async def test_a_payload_holding_a_lone_surrogate_is_shown_escaped(
    dashboard: DashboardInfo, conn: echomq.Connection, queue: str
) -> None:
    """A job's call preview with ``\\ud800`` in it reaches the page (JSON escapes), and the
    server lives (before: every snapshot failed to encode and the process ended)."""
    job_id = await jobs.enqueue(conn, queue, b'{"task":"x","args":["\\ud800"],"kwargs":{}}')
    await jobs.claim(conn, queue, 30_000)
    async with trio_websocket.open_websocket_url(ws_url(dashboard)) as ws:
        client = Client(ws)
        snap = await client.next("snapshot", lambda m: bool(m["queues"][0]["active"]))
    [active] = snap["queues"][0]["active"]
    assert (active["id"], active["call"]) == (job_id, 'x("\ud800")')
    await serves(dashboard)


def test_encode_escapes_only_what_utf8_cannot_carry() -> None:
    assert encode({"a": "é"}) == '{"a":"é"}'
    text = encode({"a": "\ud800é"})
    assert text.isascii() and json.loads(text) == {"a": "\ud800é"}


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("{}", 1),
        ('{"a":[1,{"b":[]}]}', 4),
        ('{"a":"[[[[{{{{"}', 1),  # brackets in a string do not count
        ('{"a":"\\"[[[[[["}', 1),  # nor after an escaped quote
        ('["\\\\",[[]]]', 3),  # an escaped backslash ends before the quote
        ('"[[[[', 0),  # an unended string hides the rest
        ("]]]]", 0),
    ],
)
def test_nesting_depth_is_counted_by_a_scan(text: str, depth: int) -> None:
    assert nesting_depth(text) == depth


def test_the_depth_scan_needs_no_recursion() -> None:
    """Far deeper than Python's recursion limit: counted, and stopped past the limit."""
    assert nesting_depth("[" * 100_000, limit=10**6) == 100_000
    assert nesting_depth("[" * 100_000) == MAX_DEPTH + 1
    with pytest.raises(BadMessage) as refused_:
        parse_request("[" * 2000 + "]" * 2000)
    assert refused_.value.reason == "too_deep" and "too_deep" in REFUSALS


async def test_one_failing_connection_is_logged_once_and_the_server_serves_on(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    """The shared server: a handler that raises ends its own connection only."""
    log = logging.getLogger("echomq.test_http")
    hits: list[str] = []

    async def handler(request: _http.Request) -> None:
        hits.append(request.head.path)
        if request.head.path == "/boom":
            raise RecursionError("a handler's bug")
        await request.respond(200, b"fine")

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    hosts = _http.HostRule(bind_host="127.0.0.1")
    await nursery.start(lambda task_status: _http.serve_http(
        handler, listeners, hosts=hosts, log=log, task_status=task_status))  # fmt: skip
    with caplog.at_level(logging.ERROR, logger="echomq.test_http"):
        with trio.fail_after(5):
            async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
                await stream.send_all(get("/boom"))
                assert await stream.receive_some(100) == b""  # closed, no answer
        assert (await raw_request(port, get("/ok")))[:3:2] == (200, b"fine")
    failures = [r for r in caplog.records if r.name == "echomq.test_http"]
    assert len(failures) == 1 and "a connection failed" in failures[0].getMessage()
    assert hits == ["/boom", "/ok"]
