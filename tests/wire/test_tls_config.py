"""A bad TLS configuration is a TLSError with one line, never an outage (docs/wire.md, "TLS").

A missing or unreadable file, one that holds no certificate, a key that does not match its
certificate, a CA that did not sign the server: each is ``TLSError`` (not ``ConnectionLost``,
so nothing waits or retries on it), on the trio wire, the blocking producer and the asyncio
driver alike, and a worker started with it exits 1 at once with that line.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

import echomq
import echomq.asyncio
import echomq.sync
from echomq.errors import TLSError
from echomq.testing import RedisServer, free_port, open_worker_process

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def tls_server() -> Iterator[RedisServer]:
    with RedisServer(tls=True) as server:
        yield server


def _files(server: RedisServer, tmp_path: Path) -> dict[str, str]:
    assert server.dir is not None and server.ca_file is not None
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    return {
        "ca": server.ca_file,
        "cert": str(server.dir / "server.crt"),
        "key": str(server.dir / "server.key"),
        "garbage": str(garbage),
        "dir": str(tmp_path),
    }


def bad_settings(server: RedisServer, tmp_path: Path) -> dict[str, tuple[str, str]]:
    """name -> (the URL's query, what the one line says)."""
    f = _files(server, tmp_path)
    return {
        "missing-ca": ("ssl_ca_certs=/nonexistent/ca.pem", "no such file or directory"),
        "ca-is-a-directory": (f"ssl_ca_certs={f['dir']}", "ssl_ca_certs"),
        "ca-not-a-certificate": (f"ssl_ca_certs={f['garbage']}", "ssl_ca_certs"),
        "missing-certfile": (
            f"ssl_ca_certs={f['ca']}&ssl_certfile=/nonexistent/c.pem",
            "no such file or directory",
        ),
        "key-mismatch": (
            f"ssl_ca_certs={f['ca']}&ssl_certfile={f['ca']}&ssl_keyfile={f['key']}",
            "ssl_certfile",
        ),
        "keyfile-alone": (f"ssl_ca_certs={f['ca']}&ssl_keyfile={f['key']}", "needs ssl_certfile"),
        "untrusted-server": ("", "certificate check failed"),  # the system CAs: not ours
    }


CASES = [
    "missing-ca",
    "ca-is-a-directory",
    "ca-not-a-certificate",
    "missing-certfile",
    "key-mismatch",
    "keyfile-alone",
    "untrusted-server",
]


@pytest.mark.parametrize("case", CASES)
async def test_a_bad_tls_setting_is_tls_error_on_the_trio_wire(
    tls_server: RedisServer, tmp_path: Path, case: str
) -> None:
    """Before: a missing or bad file was an OSError turned ConnectionLost (transient)."""
    query, says = bad_settings(tls_server, tmp_path)[case]
    url = f"rediss://127.0.0.1:{tls_server.port}/0?{query}"
    with trio.fail_after(5):  # not retried until connect_timeout: raised at once
        async with echomq.connect(url) as conn:
            with pytest.raises(TLSError, match=says) as caught:
                await conn.execute("PING")
    assert "\n" not in str(caught.value)


async def test_a_bad_tls_file_is_tls_error_even_when_nothing_listens(tmp_path: Path) -> None:
    """The context is built before the socket: a configuration error is not an outage."""
    url = f"rediss://127.0.0.1:{free_port()}/0?ssl_ca_certs=/nonexistent/ca.pem"
    async with echomq.connect(url) as conn:
        with pytest.raises(TLSError, match=r"ssl_ca_certs '/nonexistent/ca\.pem'"):
            await conn.execute("PING")


@pytest.mark.parametrize("case", ["missing-ca", "key-mismatch", "untrusted-server"])
def test_a_bad_tls_setting_is_tls_error_for_the_blocking_and_asyncio_drivers(
    tls_server: RedisServer, tmp_path: Path, case: str
) -> None:
    query, says = bad_settings(tls_server, tmp_path)[case]
    says = "certificate verify failed" if case == "untrusted-server" else says
    url = f"rediss://127.0.0.1:{tls_server.port}/0?{query}"
    with pytest.raises(TLSError, match=says), echomq.sync.connect(url) as conn:
        conn.list_queues()

    async def main() -> None:
        async with echomq.asyncio.connect(url) as conn:
            await conn.execute("PING")

    with pytest.raises(TLSError, match=says):
        asyncio.run(main())


@pytest.mark.parametrize("case", ["missing-ca", "untrusted-server"])
async def test_a_worker_with_a_bad_tls_setting_exits_1_at_once_with_one_line(
    tls_server: RedisServer, tmp_path: Path, queue: str, case: str
) -> None:
    """Before: `waiting for redis at rediss://... (attempt N): no such file or directory`
    forever. After: one ERROR line naming the setting, exit status 1."""
    query, says = bad_settings(tls_server, tmp_path)[case]
    url = f"rediss://127.0.0.1:{tls_server.port}/0?{query}"
    with trio.fail_after(30):
        async with open_worker_process(
            "_tls_app:queue",
            url=url,
            cwd=HERE,
            env={"EMQ_TEST_QUEUE": queue},
            wait_serving=False,
        ) as worker:
            assert await worker.wait() == 1
    errors = [line for line in worker.lines if " ERROR " in line]
    assert len(errors) == 1 and "TLS" in errors[0] and says in errors[0], worker.lines
    assert not any("waiting for redis" in line for line in worker.lines)
    assert not any("Traceback" in line for line in worker.lines)
