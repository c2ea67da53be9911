"""Options the CLI cannot use are one line on stderr and a non-zero exit, never a
traceback, and nothing is written: a bind address that is no address or does not resolve
(``worker --metrics-host``, ``dashboard --host``), JSON nested past the depth limit
(``enqueue``), a ``history --since`` no clock can reach."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio

import echomq
from echomq._scripts.keyspace import Keyspace

APP = """
import os
import echomq

queue = echomq.Queue(os.environ["EMQ_TEST_QUEUE"])


@queue.task(name="noop")
async def noop() -> None:
    return None
"""


async def run(
    url: str, *args: str, cwd: Path | None = None, queue: str = ""
) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "ECHOMQ_URL": url, "EMQ_TEST_QUEUE": queue}
    env.pop("ECHOMQ_QUEUE", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(cwd or ""), env.get("PYTHONPATH")]))
    with trio.fail_after(30):
        return await trio.run_process(
            [sys.executable, "-m", "echomq", *args],
            capture_stdout=True, capture_stderr=True, check=False, env=env, cwd=cwd,
        )  # fmt: skip


async def keys_of(conn: echomq.Connection, queue: str) -> list[object]:
    return list(await conn.execute("KEYS", Keyspace(queue).pattern))


def one_line(p: subprocess.CompletedProcess[bytes]) -> str:
    err = p.stderr.decode()
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("processes", ["1", "2"])
@pytest.mark.parametrize(
    ("host", "says"),
    [
        ("999.1.1.1", "metrics_host '999.1.1.1' is not an IPv4 address"),
        ("nosuch.invalid", "metrics_host 'nosuch.invalid' does not resolve to an address"),
    ],
)
async def test_a_metrics_host_that_is_no_address_is_one_line_exit_2(
    redis_url: str,
    conn: echomq.Connection,
    queue: str,
    tmp_path: Path,
    host: str,
    says: str,
    processes: str,
) -> None:
    (tmp_path / "hostapp.py").write_text(APP)
    p = await run(
        redis_url, "worker", "hostapp:queue", "--metrics-port", "0", "--metrics-host", host,
        "--processes", processes, cwd=tmp_path, queue=queue,
    )  # fmt: skip
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert says in one_line(p)
    assert await keys_of(conn, queue) == []  # refused before the worker made its queue


async def test_a_metrics_port_in_use_is_one_line_exit_1(
    redis_url: str, queue: str, tmp_path: Path
) -> None:
    (tmp_path / "hostapp.py").write_text(APP)
    with trio.socket.socket() as taken:
        await taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        p = await run(
            redis_url, "worker", "hostapp:queue", "--metrics-port", port, "--grace", "0",
            cwd=tmp_path, queue=queue,
        )  # fmt: skip
    assert p.returncode == 1, (p.stdout, p.stderr)
    err = p.stderr.decode()
    assert "Traceback" not in err and f"cannot serve '{queue}'" in err, err


@pytest.mark.parametrize(
    ("host", "says"),
    [
        ("999.1.1.1", "host '999.1.1.1' is not an IPv4 address"),
        ("nosuch.invalid", "host 'nosuch.invalid' does not resolve to an address"),
    ],
)
async def test_a_dashboard_host_that_is_no_address_is_one_line_exit_2(
    redis_url: str, host: str, says: str
) -> None:
    p = await run(
        redis_url, "dashboard", "--host", host, "--allow-host", "ops.example", "--port", "0"
    )
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert says in one_line(p)


def test_a_bind_host_is_checked_in_code_too() -> None:
    with pytest.raises(echomq.InvalidArgument, match="not an IPv4 address"):
        echomq.WorkerConfig(metrics_host="999.1.1.1")
    assert echomq.WorkerConfig(metrics_host="0.0.0.0").metrics_host == "0.0.0.0"


@pytest.mark.parametrize("create", [False, True])
async def test_enqueue_json_past_the_depth_limit_is_refused_before_any_write(
    redis_url: str, conn: echomq.Connection, queue: str, create: bool
) -> None:
    deep = "[" * 5000 + "]" * 5000
    argv = ["enqueue", "app.t", deep, "-q", queue] + (["--create"] if create else [])
    p = await run(redis_url, *argv)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "deeper than 100 levels" in one_line(p)
    assert await keys_of(conn, queue) == []
    at_limit = "[" * 100 + "]" * 100
    p = await run(redis_url, "enqueue", "app.t", at_limit, "-q", queue, "--create")
    assert p.returncode == 0, p.stderr
    assert await keys_of(conn, queue) != []


@pytest.mark.parametrize("since", ["99999999999d", "3000000d", "9" * 30 + "w"])
async def test_history_since_before_the_year_1_is_one_line_exit_2(
    redis_url: str, tmp_path: Path, since: str
) -> None:
    store = f"sqlite:///{tmp_path / 'history.db'}"
    for flag in ("--since", "--until"):
        p = await run(redis_url, "history", "q", "--to", store, flag, since)
        assert p.returncode == 2, (p.stdout, p.stderr)
        assert "reaches back before the year 1" in one_line(p)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["enqueue", "app.t", "[]", "-q", "{q}", "--create", "--delay", "1e308"], "--delay"),
        (["cancel", "some-id", "-q", "{q}", "--grace", "1e308"], "grace must be at most"),
        (
            ["archive", "-q", "{q}", "--to", "sqlite:///{tmp}/a.db", "--claim-idle", "1e308"],
            "claim_idle must be at most",
        ),
    ],
    ids=["enqueue --delay", "cancel --grace", "archive --claim-idle"],
)
async def test_a_duration_past_the_scripts_cap_is_one_line_exit_2(
    redis_url: str, conn: echomq.Connection, queue: str, tmp_path: Path, argv: list[str], says: str
) -> None:
    argv = [a.replace("{q}", queue).replace("{tmp}", str(tmp_path)) for a in argv]
    p = await run(redis_url, *argv)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert says in one_line(p)
    assert await keys_of(conn, queue) == []
