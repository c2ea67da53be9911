"""Helpers for the lifecycle verb tests: snapshots, the server clock, lapsing a lease.

A refusal must change nothing: ``snapshot`` DUMPs every key of the test's queue (SCAN by
the queue's pattern), so a test compares the whole queue before and after.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

import echomq
from echomq._scripts.keyspace import Keyspace
from echomq._wire.cluster import ClusterConnection

T = TypeVar("T")


async def snapshot(conn: echomq.Connection, ks: Keyspace) -> dict[bytes, bytes]:
    """Every key of the queue with its DUMP (type and value), for before/after checks."""
    keys: list[bytes] = []
    cursor: bytes | int = 0
    while True:
        cursor, found = await conn.execute("SCAN", cursor, "MATCH", ks.pattern, "COUNT", 1000)
        keys += found
        if int(cursor) == 0:
            break
    return {key: await conn.execute("DUMP", key) for key in sorted(set(keys))}


async def server_now_ms(conn: echomq.Connection) -> int:
    seconds, micros = await conn.execute("TIME")
    return int(seconds) * 1000 + int(micros) // 1000


async def on_queue_node(conn: echomq.Connection, ks: Keyspace, *args: Any) -> Any:
    """Run a keyless command (INFO, SCRIPT EXISTS) where the queue lives (its cluster node)."""
    if isinstance(conn, ClusterConnection):
        return await conn.execute_at(ks.meta, *args)
    return await conn.execute(*args)


async def run_id(conn: echomq.Connection, ks: Keyspace) -> str:
    """The run_id of the server that holds the queue (a cluster has one per node)."""
    info: bytes = await on_queue_node(conn, ks, "INFO", "server")
    for line in info.decode().splitlines():
        if line.startswith("run_id:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError("no run_id in INFO server")


async def eventually(probe: Callable[[], Awaitable[T]]) -> T:
    """Poll ``probe`` (a server-side condition) until it answers something truthy (<= 2 s)."""
    with trio.fail_after(2):
        while True:
            if result := await probe():
                return result
            await trio.sleep(0.005)


async def lapse(conn: echomq.Connection, ks: Keyspace, *job_ids: str) -> None:
    """Wait (bounded) until every id's lease deadline is behind the server clock."""
    for job_id in job_ids:
        deadline = await conn.execute("ZSCORE", ks.active, job_id)
        assert deadline is not None, job_id

        async def passed(deadline: float = float(deadline)) -> bool:
            return await server_now_ms(conn) > deadline

        await eventually(passed)


async def claim_one(conn: echomq.Connection, queue: str, lease_ms: int = 10_000) -> echomq.Claimed:
    claimed = await echomq.jobs.claim(conn, queue, lease_ms)
    assert len(claimed) == 1
    return claimed[0]


async def field(conn: echomq.Connection, ks: Keyspace, job_id: str, name: str) -> bytes | None:
    value: bytes | None = await conn.execute("HGET", ks.job(job_id), name)
    return value
