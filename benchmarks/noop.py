"""The no-op queue that ``stream`` and ``flows`` measure: its task, its worker process,
producing into it and counting what finished.

    python -m benchmarks.noop worker URL CONCURRENCY [--no-stream]   # the worker process

``--no-stream`` cuts the completions stream's ``XADD`` / ``XTRIM`` out of every script in
that worker process only (``stream`` compares the two).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

import echomq
from echomq._scripts.keyspace import Keyspace

from .files import LOGS

__all__ = ["PAYLOAD", "QUEUE", "completed", "make_queue", "produce", "until_completed",
           "used_memory", "warm_up", "worker"]  # fmt: skip

QUEUE = "bench"
PAYLOAD = "x" * 100
IN_FLIGHT = 100
ROOT = Path(__file__).resolve().parent.parent  # where ``-m benchmarks.noop`` imports


def _without_stream() -> None:
    """Cut the stream's XADD / XTRIM out of every script (this process only)."""
    from echomq._scripts import loader as scripts

    cut = re.compile(  # an XADD call may span lines: up to the "))" that ends it
        r"^\s*redis\.call\('XADD', stream,.*?\)\)\s*$|"
        r"^\s*local trimmed = redis\.call\('XTRIM'.*?$|"
        r"^\s*if trimmed > 0 then .*?$",
        re.MULTILINE | re.DOTALL,
    )
    table: Any = scripts.SCRIPTS
    for name, script in list(table.items()):
        if "redis.call('XADD', stream" in script.source:
            source = cut.sub("", script.source)
            table[name] = scripts.make_script(name, source, script.includes, script.uses)


def worker_main(argv: list[str]) -> None:
    """``python -m benchmarks.noop worker URL CONCURRENCY [--no-stream]``."""
    url, concurrency = argv[0], int(argv[1])
    if "--no-stream" in argv:
        _without_stream()
    queue = echomq.Queue(QUEUE, url=url)

    @queue.task(name="noop")
    async def noop(payload: str) -> str:
        return "ok"

    trio.run(echomq.Worker(queue, concurrency=concurrency).serve)


@asynccontextmanager
async def worker(
    url: str, concurrency: int, stream: bool, tag: str, *, src: Path | None = None
) -> AsyncIterator[None]:
    """A worker process on the no-op queue (``src``: another echomq's src/, for a turn of
    an older tree beside this one)."""
    LOGS.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "benchmarks.noop", "worker", url, str(concurrency)]
    if not stream:
        command.append("--no-stream")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    root = ROOT
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src), str(root)])
    with open(LOGS / f"noop-{tag}.log", "ab") as out:  # noqa: ASYNC230 - before the child
        proc = await trio.lowlevel.open_process(command, stdout=out, stderr=out, cwd=root, env=env)
    try:
        yield
    finally:
        proc.terminate()
        with trio.move_on_after(10):
            await proc.wait()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def make_queue(url: str) -> tuple[echomq.Queue, Any]:
    queue = echomq.Queue(QUEUE, url=url)

    @queue.task(name="noop")
    async def noop(payload: str) -> str:
        return "ok"

    return queue, noop


async def completed(conn: echomq.Connection) -> int:
    return int(await conn.execute("HGET", Keyspace(QUEUE).metrics_completed, "count") or 0)


async def produce(noop: Any, count: int) -> None:
    """``count`` jobs by ``noop.delay``, IN_FLIGHT at a time."""
    left = count

    async def one_by_one() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await noop.delay(PAYLOAD)

    async with trio.open_nursery() as nursery:
        for _ in range(IN_FLIGHT):
            nursery.start_soon(one_by_one)


async def until_completed(conn: echomq.Connection, count: int, within: float = 900) -> float:
    """Wait until ``count`` jobs completed; answer the moment (trio clock)."""
    with trio.fail_after(within):
        while await completed(conn) < count:  # noqa: ASYNC110 - polling Redis: no event
            await trio.sleep(0.01)
    return trio.current_time()


async def warm_up(conn: echomq.Connection, noop: Any) -> int:
    await produce(noop, 200)
    await until_completed(conn, 200, within=60)
    return 200


async def used_memory(conn: echomq.Connection) -> int:
    info = (await conn.execute("INFO", "memory")).decode()
    return int(re.search(r"^used_memory:(\d+)", info, re.MULTILINE)[1])  # type: ignore[index]


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker_main(sys.argv[2:])
    else:
        raise SystemExit("python -m benchmarks.noop worker URL CONCURRENCY [--no-stream]")
