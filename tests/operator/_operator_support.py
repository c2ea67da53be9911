"""Shared helpers for the operator tests: read a queue's whole keyspace."""

from __future__ import annotations

from typing import Any

import echomq
from echomq._scripts.keyspace import Keyspace


async def queue_keys(conn: echomq.Connection, queue: str) -> list[str]:
    """Every key matching emq:{queue}:*, found by a full SCAN."""
    keys: set[str] = set()
    cursor: Any = b"0"
    while True:
        cursor, batch = await conn.execute("SCAN", cursor, "MATCH", Keyspace(queue).pattern)
        keys.update(k.decode() for k in batch)
        if cursor in (b"0", 0):
            return sorted(keys)


async def snapshot(conn: echomq.Connection, queue: str) -> dict[str, object]:
    """Every key of the queue with its content, to prove a refusal wrote nothing."""
    out: dict[str, object] = {}
    for key in await queue_keys(conn, queue):
        kind = (await conn.execute("TYPE", key)).decode()
        if kind == "hash":
            out[key] = await conn.execute("HGETALL", key)
        elif kind == "zset":
            out[key] = await conn.execute("ZRANGE", key, 0, -1, "WITHSCORES")
        elif kind == "list":
            out[key] = await conn.execute("LRANGE", key, 0, -1)
        else:
            out[key] = await conn.execute("GET", key)
    return out
