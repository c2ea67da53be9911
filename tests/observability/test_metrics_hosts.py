"""A worker's ``/metrics`` answers only the hosts it should (DNS rebinding), with the
dashboard's HTTP server and rules (``echomq._http``), on a real worker's metrics port."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

import echomq
from echomq._worker.metrics import metrics_hosts
from echomq.errors import InvalidArgument


async def exchange(port: int, data: bytes) -> tuple[int, bytes]:
    """Send raw bytes to 127.0.0.1:port, read to the end: (status, body)."""
    async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
        with trio.fail_after(10):
            await stream.send_all(data)
            await stream.send_eof()
            reply = b""
            while chunk := await stream.receive_some(65536):
                reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def get(host: str | None, path: str = "/metrics", method: str = "GET") -> bytes:
    if host is None:
        return f"{method} {path} HTTP/1.0\r\n\r\n".encode()
    return f"{method} {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()


@asynccontextmanager
async def serving(url: str, queue: str, **options: Any) -> AsyncIterator[int]:
    """A worker serving ``queue`` with its metrics port open; yields the port."""
    q = echomq.Queue(queue, url=url)
    worker = echomq.Worker(q, metrics_port=0, grace=0, **options)
    async with q.open(), trio.open_nursery() as nursery:
        await nursery.start(worker.serve)
        assert worker.metrics_address is not None
        yield worker.metrics_address[1]
        nursery.cancel_scope.cancel()


async def test_a_loopback_metrics_port_answers_loopback_names_only(
    redis_url: str, queue: str
) -> None:
    with trio.fail_after(30):
        async with serving(redis_url, queue) as port:
            for host in (f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST", f"[::1]:{port}"):
                status, body = await exchange(port, get(host))
                assert status == 200 and b"echomq_worker_up" in body, host
            assert (await exchange(port, get(None)))[0] == 200  # HTTP/1.0, no Host: no browser
            for host in ("evil.example", f"evil.example:{port}", f"10.1.2.3:{port}",
                         "127.0.0.1.evil.example", f"{socket.gethostname()}:{port}"):  # fmt: skip
                assert (await exchange(port, get(host)))[0] == 421, host
            status, _ = await exchange(port, get(f"127.0.0.1:{port}", method="POST"))
            assert status == 405
            body_request = get(f"127.0.0.1:{port}")[:-2] + b"Content-Length: 3\r\n\r\nabc"
            assert (await exchange(port, body_request))[0] == 413
            assert (await exchange(port, b"GARBAGE\r\n\r\n"))[0] == 400
            assert (await exchange(port, get(f"127.0.0.1:{port}", "/nope")))[0] == 404
            assert (await exchange(port, get(f"127.0.0.1:{port}")))[0] == 200  # serves on


async def test_a_metrics_port_on_every_interface_answers_addresses_and_this_machine(
    redis_url: str, queue: str
) -> None:
    """Bound to 0.0.0.0 a scraper names the worker by address or host name: those pass; a
    DNS name of anyone else's still gets 421 (a rebinding always names a host)."""
    with trio.fail_after(30):
        async with serving(redis_url, queue, metrics_host="0.0.0.0") as port:
            for host in (f"10.1.2.3:{port}", "192.0.2.7", f"[fe80::1]:{port}",
                         f"{socket.gethostname()}:{port}", f"127.0.0.1:{port}"):  # fmt: skip
                assert (await exchange(port, get(host)))[0] == 200, host
            for host in ("evil.example", f"evil.example:{port}", "fe80::1", "10.1.2.3.nip.io"):
                assert (await exchange(port, get(host)))[0] == 421, host


def test_the_metrics_host_rule() -> None:
    """Loopback names and the bound address; given names; a wildcard adds addresses and
    this machine's name. A bad allowed name is refused before anything binds."""
    rule = metrics_hosts("192.0.2.10", ["Scrape.Example"])
    assert rule.allows("192.0.2.10:9464") and rule.allows("scrape.example:9464")
    assert rule.allows("127.0.0.1") and not rule.allows("192.0.2.11")
    wild = metrics_hosts("0.0.0.0")
    assert wild.allows("198.51.100.1:9464") and wild.allows(socket.gethostname())
    assert not wild.allows("evil.example")
    with pytest.raises(InvalidArgument):
        metrics_hosts("127.0.0.1", ["*"])
