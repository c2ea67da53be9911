"""``echomq demo`` end to end, in a subprocess: it runs the mix, serves the dashboard,
stops by itself (``--duration``) or at Ctrl-C, and leaves no redis-server behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def start_demo(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    return subprocess.Popen(
        [sys.executable, "-m", "echomq", "demo", "--port", "0", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def read_until(proc: subprocess.Popen[str], pattern: str, seen: list[str]) -> re.Match[str]:
    """Read output lines (bounded by the caller's process timeout) until one matches."""
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if match := re.search(pattern, line):
            return match
    raise AssertionError(f"no line matched {pattern!r} in:\n{''.join(seen)}")


def redis_alive(port: str) -> bool:
    """Whether a redis-server process listening on ``port`` still exists."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if args and args[0].endswith(b"redis-server") and port.encode() in args:
            return True
    return False


def finish(proc: subprocess.Popen[str], seen: list[str]) -> str:
    try:
        rest, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    return "".join(seen) + rest


def test_demo_runs_the_mix_serves_the_dashboard_and_stops_by_itself() -> None:
    """--duration 5: the page answers, a job dies, one is cancelled; exit 0, Redis gone."""
    proc = start_demo("--duration", "5")
    seen: list[str] = []
    redis_port = read_until(proc, r"redis://127\.0\.0\.1:(\d+)/", seen).group(1)
    url = read_until(proc, r"dashboard: (http://127\.0\.0\.1:\d+/)#token=\S+", seen).group(1)
    with urllib.request.urlopen(url, timeout=5) as page:
        assert page.status == 200
        assert b"echomq dashboard" in page.read()
    output = finish(proc, seen)
    assert proc.returncode == 0, output
    assert "dead after 3 attempts" in output and "CardDeclined" in output
    assert "cancelled" in output
    assert "nightly reports scheduled" in output
    done = re.search(r"done: (\d+) jobs completed", output)
    assert done is not None and int(done.group(1)) > 10, output
    assert not redis_alive(redis_port)


def test_ctrl_c_stops_the_demo_cleanly() -> None:
    """SIGINT (Ctrl-C) ends the demo with exit 0 and stops its redis-server."""
    proc = start_demo("--no-dashboard")
    seen: list[str] = []
    redis_port = read_until(proc, r"redis://127\.0\.0\.1:(\d+)/", seen).group(1)
    read_until(proc, r"running until Ctrl-C", seen)
    read_until(proc, r"nightly reports scheduled", seen)  # the producers are at work
    proc.send_signal(signal.SIGINT)
    output = finish(proc, seen)
    assert proc.returncode == 0, output
    assert "done:" in output
    assert not redis_alive(redis_port)


def test_bad_duration_is_a_usage_error() -> None:
    """A non-positive duration is refused before anything starts."""
    from echomq._testkit.demo import run_demo

    assert run_demo(url=None, duration=0, port=0, dashboard=False) == 2


@pytest.mark.parametrize("url", ["redis://127.0.0.1:1/0?connect_timeout=0.2"])
def test_unreachable_redis_url_exits_1_with_a_message(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """With a URL where nothing listens, the demo says so and answers 1."""
    from echomq._testkit.demo import run_demo

    assert run_demo(url=url, duration=1, port=0, dashboard=False) == 1
    assert "echomq demo:" in capsys.readouterr().err
