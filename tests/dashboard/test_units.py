"""Pure parts of the dashboard: request parsing, the Origin gate, throughput, payloads."""

from __future__ import annotations

import datetime
import json

import pytest

from echomq.admin import QueueStats
from echomq.dashboard.http_io import BadRequest, parse_head
from echomq.dashboard.messages import (
    AuthRequest,
    BadMessage,
    CommandRequest,
    FlowRequest,
    LogsRequest,
    parse_request,
)
from echomq.dashboard.server import DashboardInfo, Gate
from echomq.dashboard.state import FailureLog, Throughput, describe_payload


def stats(now_ms: int, completed: int, failed: int, queue: str = "q") -> QueueStats:
    return QueueStats(
        queue=queue, pending=0, scheduled=0, active=0, dead=0, completed=0, paused=False,
        completed_total=completed, failed_total=failed, completed_last_minute=0, now_ms=now_ms,
    )  # fmt: skip


def test_parse_request_accepts_the_three_shapes() -> None:
    """auth, command and logs messages become typed requests."""
    assert parse_request('{"type":"auth","token":"t"}') == AuthRequest(token="t")
    assert parse_request(
        '{"type":"command","ref":3,"action":"cancel","queue":"q","job":"j","token":"t"}'
    ) == CommandRequest(ref=3, action="cancel", queue="q", job="j", token="t")
    assert parse_request('{"type":"logs","ref":1,"queue":"q","job":"j"}') == LogsRequest(
        ref=1, queue="q", job="j"
    )
    untokened = parse_request('{"type":"command","ref":1,"action":"pause","queue":"q"}')
    assert isinstance(untokened, CommandRequest) and untokened.token == ""
    assert parse_request('{"type":"flow","ref":2,"queue":"q","job":"j"}') == FlowRequest(
        ref=2, queue="q", job="j"
    )
    assert parse_request('{"type":"flow","ref":2,"queue":"q"}') == FlowRequest(ref=2, queue="q")


@pytest.mark.parametrize(
    "text",
    [
        "{",
        '"str"',
        '{"type":"auth"}',
        '{"type":"auth","token":5}',
        '{"type":"command","ref":true,"action":"pause","queue":"q"}',
        '{"type":"command","ref":1,"action":"remove","queue":"q"}',
        '{"type":"command","ref":1,"action":"flushall","queue":"q"}',
        '{"type":"logs","ref":1,"queue":"q"}',
        json.dumps({"type": "auth", "token": "x" * 5000}),
    ],
)
def test_parse_request_refuses_malformed_messages(text: str) -> None:
    """Anything but the documented shapes raises BadMessage."""
    with pytest.raises(BadMessage):
        parse_request(text)


def test_origin_gate_accepts_only_this_servers_loopback_origins() -> None:
    """Loopback names on the bound port pass; other hosts, ports and 'null' do not."""
    gate = Gate(bind_host="127.0.0.1", port=8000)

    def head(origin: str | None) -> object:
        extra = f"Origin: {origin}\r\n" if origin else ""
        return parse_head(f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n{extra}".encode()[:-2])

    for ok in ("http://127.0.0.1:8000", "http://localhost:8000", "http://[::1]:8000", None):
        assert gate.origin_ok(head(ok))  # type: ignore[arg-type]
    for bad in ("http://evil.example", "http://127.0.0.1:8001", "https://127.0.0.1:8000", "null"):
        assert not gate.origin_ok(head(bad))  # type: ignore[arg-type]


def test_parse_head_joins_repeated_headers_and_lowercases_names() -> None:
    """Header names are case-insensitive; repeats are comma-joined."""
    head = parse_head(
        b"GET /ws?x=1 HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\n"
        b"connection: Upgrade\r\nUpgrade: websocket"
    )
    assert head.path == "/ws"
    assert head.headers["connection"] == "keep-alive, Upgrade"
    assert head.is_websocket
    with pytest.raises(BadRequest):
        parse_head(b"GET / HTTP/1.1\r\nHost: h\r\n folded: no")


def test_throughput_is_per_second_from_counter_deltas_on_the_server_clock() -> None:
    """Two seconds and 10 completions apart read as 5/s; a counter that drops reads as 0."""
    tp = Throughput(history=3, window=5.0)
    tp.add(stats(1_000, 100, 7))
    assert tp.series("q") == {"completed": [], "failed": []}
    tp.add(stats(3_000, 110, 8))
    tp.add(stats(4_000, 0, 0))  # obliterated: the window restarts
    assert tp.series("q") == {"completed": [5.0, 0.0], "failed": [0.5, 0.0]}
    for t in range(5, 9):
        tp.add(stats(t * 1000, 0, 0))
    assert len(tp.series("q")["completed"]) == 3


def test_throughput_averages_bursts_over_the_window() -> None:
    """Bursts every other second read as their average over the window, not a zig-zag."""
    tp = Throughput(history=100, window=4.0)
    total = 0
    for second in range(12):
        total += 10 if second % 2 else 0
        tp.add(stats(second * 1000, total, 0))
    assert tp.series("q")["completed"][-4:] == [5.0, 5.0, 5.0, 5.0]


def test_failure_log_keeps_the_latest_retrying_and_dead_events() -> None:
    """Only retrying/dead events are kept, newest first, up to the limit."""
    log = FailureLog(keep=2)
    log.note("q", {"event": "completed", "job": "a"}, 1)
    log.note("q", {"event": "retrying", "job": "b", "error": "x"}, 2)
    log.note("q", {"event": "dead", "job": "c", "error": "y"}, 3)
    log.note("q", {"event": "dead", "job": "d"}, 4)
    assert [(f.job, f.outcome, f.error) for f in log.recent("q")] == [
        ("d", "dead", None),
        ("c", "dead", "y"),
    ]


def test_describe_payload_previews_the_call() -> None:
    """A JSON call shows as task(args, kw=...); other bytes as a raw preview."""
    payload = json.dumps({"task": "send", "args": ["a@b.c"], "kwargs": {"n": 2}}).encode()
    assert describe_payload(payload) == ("send", 'send("a@b.c", n=2)')
    assert describe_payload(b"raw bytes") == ("?", "raw bytes")
    task, call = describe_payload(json.dumps({"task": "t", "args": ["x" * 500]}).encode())
    assert task == "t" and len(call) == 120 and call.endswith("…")


def test_describe_payload_shows_tagged_values_of_either_codec() -> None:
    """A datetime argument shows as its tag; a msgpack call as the JSON one; a class tag
    is shown, never looked up (the dashboard has not loaded the tasks' modules)."""
    from echomq._model.codec import JSON, codec_named

    when = datetime.datetime(2026, 1, 2)
    tag = '{"__emq__": "datetime", "v": "2026-01-02T00:00:00"}'
    for codec in (JSON, codec_named("msgpack")):
        assert describe_payload(codec.encode_call("t", [when], {"b": b"x"}))[1] in (
            f't({tag}, b={{"__emq__": "bytes", "v": "eA=="}})',
            f"t({tag}, b=\"b'x'\")",
        )
    unknown = b'{"task":"t","args":[{"__emq__":"dataclass","v":["nowhere:C",{}]}]}'
    assert describe_payload(unknown) == ("t", 't({"__emq__": "dataclass", "v": ["nowhere:C", {}]})')


@pytest.mark.parametrize("depth", [*range(900, 1001, 10), 5_000, 100_000])
def test_describe_payload_of_deeply_nested_json_is_a_raw_preview(depth: int) -> None:
    """JSON nested past Python's recursion limit never raises: it shows raw."""
    payload = b'{"task":"t","args":[' + b"[" * depth + b"]" * depth + b"]}"
    task, call = describe_payload(payload)
    assert call.startswith('{"task":"t","args":[[[') or task == "t"


def test_describe_payload_of_binary_garbage_shows_its_bytes() -> None:
    """Bytes that are not UTF-8 show escaped, not as replacement characters."""
    assert describe_payload(b"\xff\xfeok\x80") == ("?", "\\xff\\xfeok\\x80")


def test_dashboard_info_urls_carry_the_token_only_in_the_fragment() -> None:
    """login_url puts the token after '#', which browsers never send to the server."""
    info = DashboardInfo(host="127.0.0.1", port=8000, token="abc")
    assert info.url == "http://127.0.0.1:8000/"
    assert info.login_url == "http://127.0.0.1:8000/#token=abc"
    assert "abc" not in repr(info)
