"""Bounded waits on observable state, shared by the test packages (``from _waits import``).

A test never sleeps to let something happen: it waits until it can see it happened.
- :func:`until`: a condition read from anywhere (a counter, a row, a log file).
- :func:`blocked`: a named connection is blocked on the server (``CLIENT LIST`` shows its
  ``b`` flag: a BLPOP has reached the server and waits).
- :func:`clock_past` / :func:`clock_moves`: the server clock (the one every lease and
  schedule score is on) has passed a point; :func:`due` a scheduled job is due.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio

import echomq
from echomq._scripts.keyspace import Keyspace
from echomq._wire.cluster import ClusterConnection

CLOCK_KEY = "emq:{clock}:meta"  # any key: TIME runs on its node (a cluster: any master)


async def until(check: Callable[[], bool | Awaitable[bool]], within: float = 5.0) -> None:
    """Poll (bounded) until ``check()`` answers True: for state with no event to wait on."""
    with trio.fail_after(within):
        while True:
            answer = check()
            if not isinstance(answer, bool):
                answer = await answer
            if answer:
                return
            await trio.sleep(0.005)


async def _at(conn: Any, key: str, *args: Any) -> Any:
    """A keyless command on the node that holds ``key`` (any node of one server)."""
    if isinstance(conn, ClusterConnection):
        return await conn.execute_at(key, *args)
    return await conn.execute(*args)


async def is_blocked(conn: echomq.Connection, name: str, key: str) -> bool:
    """Whether the client named ``name`` is blocked on the node that holds ``key``."""
    listing: bytes = await _at(conn, key, "CLIENT", "LIST")
    for line in listing.decode().splitlines():
        fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
        if fields.get("name") == name and "b" in fields.get("flags", ""):
            return True
    return False


async def blocked(conn: echomq.Connection, name: str, key: str, within: float = 5.0) -> None:
    """Wait until the connection opened with ``client_name=name`` is blocked (BLPOP) on the
    node that holds ``key``."""
    await until(lambda: is_blocked(conn, name, key), within)


async def server_ms(conn: echomq.Connection, key: str = CLOCK_KEY) -> int:
    seconds, micros = await _at(conn, key, "TIME")
    return int(seconds) * 1000 + int(micros) // 1000


async def clock_past(conn: echomq.Connection, when_ms: float, key: str = CLOCK_KEY) -> None:
    """Wait until the server clock is past ``when_ms``."""

    async def passed() -> bool:
        return await server_ms(conn, key) > when_ms

    await until(passed)


async def clock_moves(conn: echomq.Connection, ms: int, key: str = CLOCK_KEY) -> None:
    """Wait until ``ms`` milliseconds of server clock have passed from now."""
    await clock_past(conn, await server_ms(conn, key) + ms - 1, key)


async def due(conn: echomq.Connection, queue: str, *job_ids: str) -> None:
    """Wait until each scheduled job's run-at (its schedule score) is behind the server."""
    ks = Keyspace(queue)
    for job_id in job_ids:
        score = await conn.execute("ZSCORE", ks.schedule, job_id)
        assert score is not None, f"{job_id} is not scheduled"
        await clock_past(conn, float(score), ks.meta)
