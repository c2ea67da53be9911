"""The Redis ceiling, measured with ``redis-benchmark`` against the same private server.

Every command line is built from echomq's own call builders (``*_call(...).evalsha_args()``),
so the ceiling runs exactly the script, keys and argv that the verbs send. Scripts are
loaded with ``SCRIPT LOAD`` first. Defaults: ``-P 16`` and redis-benchmark's default 50
clients; ``-n`` is chosen per figure.
"""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
from collections.abc import Sequence

import trio

from echomq._scripts.calls import SCRIPTS

__all__ = ["PIPELINE", "CLIENTS", "command_line", "load_scripts", "redis_benchmark"]

PIPELINE = 16
CLIENTS = 50


def _binary() -> str:
    found = shutil.which("redis-benchmark") or "/usr/bin/redis-benchmark"
    return found


def command_line(
    port: int,
    args: Sequence[str | bytes | int | float],
    n: int,
    *,
    random_keyspace: int = 0,
    pipeline: int = PIPELINE,
    clients: int = CLIENTS,
) -> list[str]:
    line = [_binary(), "-p", str(port), "-P", str(pipeline), "-c", str(clients), "-n", str(n)]
    if random_keyspace:
        line += ["-r", str(random_keyspace)]
    line += ["--csv"]
    return line + [a.decode() if isinstance(a, bytes) else str(a) for a in args]


async def redis_benchmark(
    port: int,
    args: Sequence[str | bytes | int | float],
    n: int,
    *,
    random_keyspace: int = 0,
    pipeline: int = PIPELINE,
    clients: int = CLIENTS,
) -> float:
    """Requests per second that redis-benchmark measured for one command (its CSV ``rps``)."""
    line = command_line(
        port, args, n, random_keyspace=random_keyspace, pipeline=pipeline, clients=clients
    )
    done = await trio.run_process(line, capture_stdout=True, capture_stderr=True, check=False)
    out = done.stdout.decode()
    if done.returncode != 0:
        raise RuntimeError(f"redis-benchmark failed ({done.returncode}): {done.stderr.decode()}")
    rows = list(csv.reader(io.StringIO(out)))
    for row in rows[1:]:
        if len(row) >= 8:  # test name (not escaped by redis-benchmark), rps, 6 latencies
            return float(row[-7])
    raise RuntimeError(f"redis-benchmark printed no figure: {out!r}")


async def load_scripts(conn: object, *names: str) -> None:
    """``SCRIPT LOAD`` the named scripts so redis-benchmark's EVALSHA finds them."""
    for name in names:
        sha = await conn.execute("SCRIPT", "LOAD", SCRIPTS[name].source)  # type: ignore[attr-defined]
        if (sha.decode() if isinstance(sha, bytes) else sha) != SCRIPTS[name].sha:
            raise RuntimeError(f"{name}: server sha differs from echomq's")


def quote(line: Sequence[str]) -> str:
    """A copy-pasteable shell form of ``line`` (for the README)."""
    import shlex

    return " ".join(shlex.quote(a) for a in line)


def run_sync(line: Sequence[str]) -> str:
    return subprocess.run(line, check=True, capture_output=True, text=True).stdout
