"""`echomq dashboard` options: usage errors exit 2 before anything listens; a non-loopback
bind needs --allow-host and warns. Run as subprocesses."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest
import trio


async def run_briefly(url: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    """`python -m echomq ARGS`; a usage error ends it at once (before: some served forever)."""
    env = {**os.environ, "ECHOMQ_URL": url}
    with trio.fail_after(15):
        return await trio.run_process(
            [sys.executable, "-m", "echomq", *args],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=env,
        )


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--port", "99999"], "0..65535"),
        (["--port", "-1"], "0..65535"),
        (["--port", "http"], "not a port number"),
        (["--queue", "bad name!"], "bad name!"),
        (["--queue", "ok", "--queue", ""], "queue"),
        (["--token", ""], "token"),
        (["--token", "short"], "8..256"),
        (["--token", "with spaces inside"], "8..256"),
        (["--host", "0.0.0.0"], "--allow-host"),
        (["--host", "0.0.0.0", "--allow-host", "*"], "wildcard"),
        (["--archive", "mysql://db/x"], "sqlite"),
    ],
)
async def test_bad_dashboard_options_exit_2_with_a_clear_message(
    redis_url: str, args: list[str], said: str
) -> None:
    p = await run_briefly(redis_url, "dashboard", *args)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert said in p.stderr.decode()
    assert "Traceback" not in p.stderr.decode()
    assert b"dashboard on" not in p.stdout  # nothing was served


async def test_non_loopback_bind_with_allow_host_warns_and_checks_the_host(
    redis_url: str, queue: str
) -> None:
    env = {**os.environ, "ECHOMQ_URL": redis_url}
    command = [sys.executable, "-m", "echomq", "dashboard", "--host", "0.0.0.0", "--port", "0",
               "--allow-host", "dash.example.com", "--queue", queue]  # fmt: skip
    proc = await trio.lowlevel.open_process(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        seen = b""
        with trio.fail_after(15):
            while not (match := re.search(rb"dashboard on http://127\.0\.0\.1:(\d+)/", seen)):
                seen += await proc.stdout.receive_some(4096)
        port = int(match.group(1))
        for host, status in ((f"evil.example:{port}", 421), ("dash.example.com", 200)):
            async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
                await stream.send_all(f"GET / HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
                with trio.fail_after(5):
                    reply = await stream.receive_some(64)
            assert reply.startswith(f"HTTP/1.1 {status}".encode()), (host, reply)
        proc.send_signal(signal.SIGINT)
        with trio.fail_after(10):
            assert await proc.wait() == 0
        warning = (await proc.stderr.receive_some(65536)).decode()
    finally:
        if proc.returncode is None:
            proc.kill()
            with trio.CancelScope(shield=True):
                await proc.wait()
    assert "warning" in warning and "not loopback" in warning and "dash.example.com" in warning
