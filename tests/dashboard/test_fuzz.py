"""Fuzzing the dashboard (a real ``echomq dashboard`` process on the test redis-server) and
a real worker's ``/metrics`` port, both served by ``echomq._http``: whatever arrives, the
process lives, every answer is a typed refusal (websocket) or a clean 4xx (HTTP), and a
normal request is served afterwards.

Hypothesis draws the cases: nesting depth, unicode (lone surrogates as JSON escapes and
as bytes in binary frames), sizes past both limits, unknown types and actions, missing,
wrong and right tokens, fields of every type; on the HTTP side request lines, methods,
targets, versions, Host values, header sizes, bodies, and byte soup. Each case is one
connection. The suite runs a few hundred cases in seconds; ``ECHOMQ_FUZZ_EXAMPLES=N``
runs N per target (the figure each target prints, with ``-s``: cases run, deaths).
"""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio_websocket
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import echomq
from echomq import admin, errors
from echomq._http import MAX_HEAD
from echomq.dashboard.http_io import ASSETS
from echomq.dashboard.messages import ACTIONS, MAX_MESSAGE, REFUSALS
from echomq.dashboard.server import MAX_WS_MESSAGE
from echomq.testing import RedisServer, free_port, open_worker_process

from ._client import own_websocket

EXAMPLES = int(os.environ.get("ECHOMQ_FUZZ_EXAMPLES", "0")) or None
TOKEN = "fuzz-token-1234"
QUEUE = f"fuzz-{uuid.uuid4().hex[:8]}"
FUZZ = settings(
    max_examples=EXAMPLES or 150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# kinds a refused result may have (docs/dashboard.md), besides a verb's error class name
KINDS = {"bad_message", "unauthorized", "invalid", "unknown_queue", "no_archive", "unavailable"}


@attrs.define
class Served:
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    def check_alive(self) -> None:
        """Still running, nothing logged as failed, and a page and a websocket served."""
        assert self.process.poll() is None, self.log.read_text()
        logged = self.log.read_text(errors="replace")
        assert "failed" not in logged and "Traceback" not in logged, logged
        status, _ = http_exchange(self.port, request_bytes("GET", "/", self.port))
        assert status == 200
        trio.run(hello, self.port)


async def hello(port: int) -> None:
    with trio.fail_after(5):
        async with own_websocket(port) as ws:
            assert json.loads(await ws.get_message())["type"] == "hello"


@pytest.fixture(scope="module")
def served(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``echomq dashboard`` in a child process, following QUEUE (made first: the verbs
    refuse a queue that does not exist), on a free port."""
    trio.run(_make_queue, redis_server.url)
    log = tmp_path_factory.mktemp("fuzz") / "dashboard.log"
    command = [sys.executable, "-m", "echomq", "dashboard", "--url", redis_server.url,
               "--port", "0", "--token", TOKEN, "--queue", QUEUE]  # fmt: skip
    with log.open("wb") as stderr:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr)
    try:
        port = _announced_port(process)
        yield Served(process, port, log)
    finally:
        process.send_signal(signal.SIGINT)
        code = process.wait(15)
        assert process.stdout is not None
        process.stdout.close()
    assert code == 0, log.read_text()


async def _make_queue(url: str) -> None:
    async with echomq.connect(url) as conn:
        await admin.ensure_schema(conn, QUEUE)


def _announced_port(process: subprocess.Popen[bytes]) -> int:
    assert process.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(process.stdout, selectors.EVENT_READ)
        while sel.select(timeout=20):
            line = process.stdout.readline().decode()
            if found := re.search(r"dashboard on http://127\.0\.0\.1:(\d+)/", line):
                return int(found.group(1))
            assert line, "the dashboard exited before it listened"
    raise AssertionError("the dashboard did not announce its port within 20 s")


# -- the websocket ------------------------------------------------------------------------

SURROGATES = st.integers(0xD800, 0xDFFF).map(chr)
TEXT = st.text(max_size=30)  # no surrogate (hypothesis draws none unasked)
ANY_TEXT = st.text(st.characters() | SURROGATES, max_size=30)  # lone surrogates too
ACTION_NAMES = st.sampled_from(sorted(ACTIONS))
TYPES = st.sampled_from(["command", "auth", "logs", "history", "flow"])
PRESENT = st.sampled_from([True] * 7 + [False])  # hypothesis draws early choices more often


def json_values(text: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    leaves = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | text
    return st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
        max_leaves=12,
    )


def fields(text: st.SearchStrategy[str]) -> dict[str, st.SearchStrategy[Any]]:
    """Each field's values: mostly of the right type (a one_of branch is drawn evenly)."""
    values = json_values(text)
    return {
        "ref": st.one_of(st.integers(0, 1000), st.integers(0, 1000), st.integers(-3, 2**60),
                         st.sampled_from([2**53 - 1, 2**53]), values),
        "action": st.one_of(ACTION_NAMES, ACTION_NAMES, text, values),
        "queue": st.one_of(st.just(QUEUE), st.just(QUEUE),
                           st.sampled_from(["other-queue", "bad name!", ""]), text, values),
        "job": st.one_of(st.uuids().map(str), text, values),
        "token": st.one_of(st.just(TOKEN), st.sampled_from(["", "wrong-token-1"]), text, values),
        "limit": st.one_of(st.integers(-3, 300), values),
        "state": st.one_of(st.sampled_from(["completed", "dead", "cancelled", "running"]), values),
        "before": st.one_of(text, values),
        "task": st.one_of(text, values),
        "type": st.one_of(*[TYPES] * 4, text, values),
    }  # fmt: skip


@st.composite
def shaped(draw: st.DrawFn, text: st.SearchStrategy[str]) -> dict[str, Any]:
    """A request-like object: a known or unknown type, each field present (7 times in 8)
    or not, of the right type or any other; strings drawn from ``text``."""
    message: dict[str, Any] = {}
    for name, values in fields(text).items():
        if draw(PRESENT):
            message[name] = draw(values)
    return message


@st.composite
def near_valid(draw: st.DrawFn) -> dict[str, Any]:
    """A well-formed request of each type (the right token and queue, or not), with at
    most one field taken out or given any value: these reach the verbs."""
    job = draw(st.uuids().map(str))
    token = draw(st.sampled_from([TOKEN, TOKEN, "wrong-token-1", ""]))
    templates: list[dict[str, Any]] = [
        {"type": "auth", "token": token},
        {"type": "command", "action": draw(ACTION_NAMES), "queue": QUEUE, "job": job,
         "token": token},
        {"type": "logs", "queue": QUEUE, "job": job},
        {"type": "history", "queue": QUEUE, "limit": draw(st.integers(1, 200))},
        {"type": "flow", "queue": draw(st.sampled_from([QUEUE, "other-queue"])), "job": job},
    ]  # fmt: skip
    message = {**draw(st.sampled_from(templates)), "ref": draw(st.integers(0, 2**53 - 1))}
    change = draw(st.sampled_from([None, *sorted(message)]))
    if change is not None and draw(st.booleans()):
        del message[change]
    elif change is not None:
        message[change] = draw(json_values(ANY_TEXT))
    return message


@st.composite
def framed(draw: st.DrawFn, values: st.SearchStrategy[Any]) -> str | bytes:
    """A JSON text as a text frame or a binary one; a lone surrogate goes as a JSON escape,
    or raw in a binary frame (bytes that are not UTF-8)."""
    value = draw(values)
    text = json.dumps(value, ensure_ascii=draw(st.booleans()))
    try:
        data = text.encode()
    except UnicodeEncodeError:
        if draw(st.booleans()):
            return json.dumps(value)
        return text.encode("utf-8", "surrogatepass")
    return data if draw(st.booleans()) else text


def nested(depth: int, opener: str) -> str:
    closer = {"[": "]", '{"a":': "}", '[{"b":': "}]"}[opener]
    return opener * depth + "1" + closer * depth


MESSAGES: st.SearchStrategy[str | bytes] = st.one_of(
    framed(near_valid()),
    framed(near_valid()),
    framed(shaped(TEXT)),
    framed(shaped(TEXT)),
    framed(shaped(TEXT)),
    framed(shaped(ANY_TEXT)),
    framed(json_values(ANY_TEXT)),
    st.builds(nested, st.integers(1, 5000), st.sampled_from(["[", '{"a":', '[{"b":'])),
    st.text(st.sampled_from('[]{}",:1a\\ '), max_size=5000),
    st.text(max_size=300),
    st.binary(max_size=300),
    st.integers(0, 100_000).map(lambda n: json.dumps({"type": "auth", "token": "x" * n})),
    st.integers(MAX_MESSAGE - 40, MAX_MESSAGE + 40).map(
        lambda n: '{"type":"auth","token":"' + "é" * (n // 2) + '"}'
    ),
)


def _size(message: str | bytes) -> int:
    return len(message.encode("utf-8", "surrogatepass") if isinstance(message, str) else message)


def check_reply(reply: dict[str, Any]) -> str:
    """A typed answer (never ``internal``); answers its label for the tally."""
    if reply["type"] == "auth":
        return f"auth ok={reply['ok']}"
    assert reply["type"] == "result", reply
    if reply["ok"]:
        return "ok"
    kind = str(reply["kind"])
    assert kind in KINDS or isinstance(getattr(errors, kind, None), type), reply
    if kind == "bad_message":
        assert reply["reason"] in REFUSALS, reply
        return f"bad_message {reply['reason']}"
    return kind


async def ws_case(port: int, message: str | bytes) -> str:
    """Send one message on a new connection; the answer must be typed and the connection
    usable after it, or (only past the frame limit) closed with 1009."""
    with trio.fail_after(10):
        async with own_websocket(port) as ws:
            try:
                await ws.send_message(message)
                while True:
                    reply = json.loads(await ws.get_message())
                    if reply["type"] in ("result", "auth"):
                        break
            except (trio_websocket.ConnectionClosed, trio.BrokenResourceError) as exc:
                assert _size(message) > MAX_WS_MESSAGE, f"closed after {message[:80]!r}: {exc!r}"
                return "closed: too big"
            label = check_reply(reply)
            await ws.send_message(json.dumps({"type": "auth", "token": TOKEN}))
            while (answer := json.loads(await ws.get_message()))["type"] != "auth":
                pass
            assert answer["ok"] is True
            return label


def run_fuzz(
    name: str,
    strategy: st.SearchStrategy[Any],
    case: Callable[[Any], str],
    examples: Sequence[Any] = (),
) -> Counter[str]:
    """Run ``case`` on every drawn value and on each of ``examples`` (always run);
    answers the tally of labels (and prints it)."""
    tally: Counter[str] = Counter()

    def one(value: Any) -> None:
        tally[case(value)] += 1

    test = given(strategy)(one)
    for value in examples:
        test = example(value)(test)
    FUZZ(test)()
    print(f"\n{name}: {sum(tally.values())} cases, 0 deaths; {dict(tally.most_common())}")
    return tally


WS_EXAMPLES: list[str | bytes] = [
    "[" * 1000 + "]" * 1000,  # the message that ended the process
    json.dumps({"type": "auth", "token": TOKEN}).encode(),
    json.dumps({"type": "command", "ref": 1, "action": "pause", "queue": QUEUE}),
    json.dumps({"type": "command", "ref": 2, "action": "resume", "queue": QUEUE, "token": TOKEN}),
    json.dumps({"type": "logs", "ref": 3, "queue": "other-queue", "job": "j"}),
    json.dumps(
        {
            "type": "command",
            "ref": 4,
            "action": "remove",
            "queue": QUEUE,
            "job": "x",
            "token": TOKEN,
        }
    ),
    '{"type":"auth","token":"\\ud800"}',
    b'{"type":"auth","token":"\xed\xa0\x80"}',  # a surrogate's bytes: not UTF-8
    "x" * (MAX_WS_MESSAGE + 1),
]
WS_LABELS = {"bad_message too_deep", "auth ok=True", "unauthorized", "ok", "unknown_queue",
             "JobGone", "bad_message not_utf8", "closed: too big"}  # fmt: skip


def test_websocket_fuzz_kills_nothing(served: Served) -> None:
    tally = run_fuzz(
        "websocket", MESSAGES, lambda m: trio.run(ws_case, served.port, m), WS_EXAMPLES
    )
    served.check_alive()
    assert sum(tally.values()) >= min(FUZZ.max_examples, 50)
    assert WS_LABELS <= set(tally), tally


@attrs.frozen
class Frame:
    """One websocket frame as a client writes it (masked, unless ``masked`` is False)."""

    opcode: int
    payload: bytes
    fin: bool = True
    rsv: int = 0
    masked: bool = True

    def data(self) -> bytes:
        head = bytes([(0x80 if self.fin else 0) | (self.rsv << 4) | self.opcode])
        size = len(self.payload)
        mask_bit = 0x80 if self.masked else 0
        if size < 126:
            head += bytes([mask_bit | size])
        elif size < 65536:
            head += bytes([mask_bit | 126]) + size.to_bytes(2, "big")
        else:
            head += bytes([mask_bit | 127]) + size.to_bytes(8, "big")
        if not self.masked:
            return head + self.payload
        key = b"\x12\x34\x56\x78"
        return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(self.payload))


INVALID_UTF8 = [b"\xff", b"\xed\xa0\x80", b"\xc3", b"\xf4\x90\x80\x80", b'{"a":"\xe9"}']
FRAMES = st.lists(
    st.builds(
        Frame,
        opcode=st.sampled_from([0x1, 0x1, 0x2, 0x0, 0x8, 0x9, 0xA]) | st.integers(0, 15),
        payload=st.one_of(st.sampled_from(INVALID_UTF8), st.binary(max_size=200),
                          st.text(max_size=100).map(str.encode)),
        fin=st.booleans() | st.just(True),
        rsv=st.just(0) | st.integers(0, 7),
        masked=st.just(True) | st.booleans(),
    ),
    min_size=1,
    max_size=4,
).map(lambda frames: b"".join(f.data() for f in frames)) | st.binary(max_size=300)  # fmt: skip
UPGRADE = (
    "GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
    "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    "Sec-WebSocket-Version: 13\r\n\r\n"
)


def frames_case(port: int, data: bytes) -> str:
    """Upgrade on raw TCP, then write ``data`` as frames: the server closes the connection
    or keeps reading it, never more; answers how the connection ended."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(UPGRADE.format(port=port).encode())
        reply = b""
        while b"\r\n\r\n" not in reply:
            reply += sock.recv(4096)
        assert reply.startswith(b"HTTP/1.1 101 "), reply[:100]
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(65536):
                pass
        except ConnectionResetError:
            return "reset"
    return "closed"


FRAME_EXAMPLES = [
    Frame(0x1, b"\xff\xfe").data(),  # a text frame that is not UTF-8 (1007)
    Frame(0x1, b'{"type":"auth","token":"\xed\xa0\x80"}').data(),  # a surrogate's bytes
    Frame(0x1, b'{"type":"auth"}', masked=False).data(),  # a client frame must be masked
    Frame(0x9, b"x" * 200).data(),  # a control frame longer than 125 bytes
    Frame(0x1, b"[[", fin=False).data() + Frame(0x2, b"]]").data(),  # interleaved
]


def test_raw_websocket_frames_kill_nothing(served: Served) -> None:
    """Frames trio-websocket's client would never write: invalid UTF-8 in text frames,
    unmasked, reserved bits and opcodes, broken fragments, junk."""
    tally = run_fuzz("websocket frames", FRAMES, lambda d: frames_case(served.port, d),
                     FRAME_EXAMPLES)  # fmt: skip
    served.check_alive()
    assert sum(tally.values()) >= min(FUZZ.max_examples, 50)


# -- HTTP -----------------------------------------------------------------------------------

TOKEN_CHARS = st.characters(codec="ascii", categories=["L", "N"]) | st.sampled_from(
    "!#$%&'*+-.^_`|~"
)
HEADER_NAMES = st.text(TOKEN_CHARS, min_size=1, max_size=12).filter(
    lambda n: (
        n.lower() not in {"host", "content-length", "transfer-encoding", "connection", "upgrade"}
    )
)
VISIBLE = st.characters(min_codepoint=0x21, max_codepoint=0x7E)
HEADER_VALUES = st.text(VISIBLE, max_size=40)
OWN = "{own}"  # replaced by the server's port when sent
OWN_HOSTS = [f"127.0.0.1:{OWN}", f"localhost:{OWN}", f"[::1]:{OWN}", "127.0.0.1", "LOCALHOST"]
FOREIGN_HOSTS = [
    "evil.example",
    f"evil.example:{OWN}",
    f"10.1.2.3:{OWN}",
    "0.0.0.0",
    "localhost.evil",
]


@attrs.frozen
class HttpCase:
    method: str
    target: str
    version: str
    hosts: tuple[str, ...]
    headers: tuple[tuple[str, str], ...]
    body: bytes | None
    chunked: bool
    pad: int

    def data(self, port: int) -> bytes:
        lines = [f"{self.method} {self.target} {self.version}"]
        lines += [f"Host: {h.replace(OWN, str(port))}" for h in self.hosts]
        lines += [f"{n}: {v}" for n, v in self.headers]
        if self.pad:
            lines.append("X-Pad: " + "a" * self.pad)
        body = b""
        if self.body is not None and self.chunked:
            lines.append("Transfer-Encoding: chunked")
            body = f"{len(self.body):x}\r\n".encode() + self.body + b"\r\n0\r\n\r\n"
        elif self.body is not None:
            lines.append(f"Content-Length: {len(self.body)}")
            body = self.body
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + body

    def expected(self, port: int, paths: set[str]) -> int:
        """The status this well-formed request must get (the order of the checks)."""
        data = self.data(port)
        if data.index(b"\r\n\r\n") + 4 > MAX_HEAD:
            return 431
        if len(self.hosts) > 1 or (not self.hosts and self.version == "HTTP/1.1"):
            return 400  # h11: a duplicate Host, or none in HTTP/1.1
        if self.hosts and self.hosts[0] not in OWN_HOSTS:
            return 421
        if self.method not in ("GET", "HEAD"):
            return 405
        if self.body is not None:
            return 413
        return 200 if self.target.split("?", 1)[0] in paths else 404


METHODS = ["POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "CONNECT", "BREW"]
TARGETS = ["/", "/index.html", "/app.js", "/metrics", "/ws", "/nope", "/../x", "/%2e%2e/",
           "/?a=b", "/metrics?x"]  # fmt: skip
ONE_OWN_HOST = st.sampled_from(OWN_HOSTS).map(lambda h: (h,))
HTTP_CASES = st.builds(
    HttpCase,
    method=st.one_of(st.just("GET"), st.just("GET"), st.just("HEAD"), st.sampled_from(METHODS),
                     st.text(TOKEN_CHARS, min_size=1, max_size=8)),
    target=st.one_of(st.sampled_from(TARGETS),
                     st.text(VISIBLE, max_size=30).map(lambda t: "/" + t)),
    version=st.sampled_from(["HTTP/1.1", "HTTP/1.1", "HTTP/1.0"]),
    hosts=st.one_of(ONE_OWN_HOST, ONE_OWN_HOST,
                    st.lists(st.sampled_from(OWN_HOSTS + FOREIGN_HOSTS), max_size=2).map(tuple)),
    headers=st.lists(st.tuples(HEADER_NAMES, HEADER_VALUES), max_size=4).map(tuple),
    body=st.one_of(st.none(), st.none(), st.binary(min_size=1, max_size=20_000)),
    chunked=st.booleans(),
    pad=st.one_of(st.just(0), st.just(0), st.sampled_from([MAX_HEAD - 200, MAX_HEAD]),
                  st.integers(0, 30_000)),
)  # fmt: skip
VALID = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


@st.composite
def soup(draw: st.DrawFn) -> bytes:
    """Bytes: a valid request with bytes cut, inserted or replaced, or bytes alone."""
    if draw(st.booleans()):
        return draw(st.binary(max_size=2000))
    data = bytearray(VALID)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        cut = draw(st.integers(0, 4))
        data[at : at + cut] = draw(
            st.binary(max_size=8) | st.sampled_from([b"\r\n", b"\n", b" ", b":", b"\x00", b"\xff"])
        )
    return bytes(data)


def request_bytes(method: str, target: str, port: int) -> bytes:
    return f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()


def http_exchange(port: int, data: bytes, *, framed: bool = True) -> tuple[int, bytes]:
    """Send ``data``, end the sending side, read the whole answer: (status, raw reply).
    ``framed``: check the body's length against Content-Length (not for a HEAD)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    head, sep, body = reply.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0]
    assert sep and status_line.startswith(b"HTTP/1.1 "), reply[:200]
    headers = head.decode("latin-1").lower()
    assert "connection: close" in headers, head
    status = int(status_line.split()[1])
    if framed and status != 101 and not data.startswith(b"HEAD "):
        length = re.search(r"content-length: (\d+)", headers)
        assert length is not None and int(length.group(1)) == len(body), head
    return status, reply


def _case(method: str = "GET", target: str = "/", hosts: tuple[str, ...] = (f"127.0.0.1:{OWN}",),
          body: bytes | None = None, chunked: bool = False, pad: int = 0) -> HttpCase:  # fmt: skip
    return HttpCase(method, target, "HTTP/1.1", hosts, (), body, chunked, pad)


HTTP_EXAMPLES: list[HttpCase | bytes] = [
    _case(),
    _case("HEAD", "/metrics"),
    _case(target="/nope"),
    _case(hosts=("evil.example",)),
    _case("POST"),
    _case(body=b"x" * 10_000),
    _case(body=b"data", chunked=True),
    _case(pad=MAX_HEAD),
    _case(hosts=()),
    b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03",  # a TLS hello
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n folded: line\r\n\r\n",
]
HTTP_STATUSES = {"200", "400", "404", "405", "413", "421", "431"}


def http_case(port: int, paths: set[str]) -> Callable[[HttpCase | bytes], str]:
    def case(value: HttpCase | bytes) -> str:
        if isinstance(value, bytes):
            status, _ = http_exchange(port, value, framed=False)
            assert 200 <= status < 500 or status == 101, status  # never a 5xx
            return f"soup {status}"
        status, _ = http_exchange(port, value.data(port))
        assert status == value.expected(port, paths), (value, status)
        return str(status)

    return case


def test_http_fuzz_of_the_dashboard_gets_clean_4xx(served: Served) -> None:
    paths = set(ASSETS) | {"/metrics"}
    case = http_case(served.port, paths)
    tally = run_fuzz("dashboard http", HTTP_CASES | soup(), case, HTTP_EXAMPLES)
    served.check_alive()
    assert HTTP_STATUSES <= set(tally), tally


async def test_http_fuzz_of_a_worker_metrics_port(
    redis_url: str, queue: str, tmp_path: Path
) -> None:
    """The same fuzz on a real worker's ``--metrics-port``; it serves on, and runs jobs."""
    import echomq

    (tmp_path / "fuzz_app.py").write_text(
        f"import echomq\nqueue = echomq.Queue({queue!r})\n"
        "@queue.task(name='add')\nasync def add(a, b):\n    return a + b\n"
    )
    port = free_port()
    log = tmp_path / "worker.log"
    q = echomq.Queue(queue, url=redis_url)

    @q.task(name="add")
    async def add(a: int, b: int) -> int:
        return a + b

    async with (
        open_worker_process("fuzz_app:queue", url=redis_url, cwd=tmp_path, log_path=log,
                            args=["--metrics-port", str(port)]) as worker,
        q.open(),
    ):  # fmt: skip
        case = http_case(port, {"/", "/metrics"})
        tally = await trio.to_thread.run_sync(
            run_fuzz, "metrics http", HTTP_CASES | soup(), case, HTTP_EXAMPLES
        )
        status, _ = await trio.to_thread.run_sync(
            http_exchange, port, request_bytes("GET", "/metrics", port)
        )
        assert status == 200
        assert worker.returncode is None
        assert await (await add.delay(2, 3)).result(timeout=10) == 5
    assert "a connection failed" not in log.read_text(errors="replace")
    assert HTTP_STATUSES <= set(tally), tally
