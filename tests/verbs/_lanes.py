"""Helpers for the group-lane tests: the lanes' invariants, read from the server.

``check_lanes`` reads every lane key of a queue and asserts what docs/lanes.md promises:
the counts agree with the lanes, every ring member may start a job, every group with work
is in the registry, and each group's ``gstate`` count is the number of its jobs held now.
"""

from __future__ import annotations

from collections import Counter

import echomq
from echomq import jobs
from echomq._scripts.keyspace import Keyspace


async def _keys(conn: echomq.Connection, ks: Keyspace) -> list[str]:
    found: list[bytes] = []
    cursor: bytes | int = 0
    while True:
        cursor, batch = await conn.execute("SCAN", cursor, "MATCH", ks.pattern, "COUNT", 1000)
        found += batch
        if int(cursor) == 0:
            return sorted({k.decode() for k in found})


async def lanes_of(conn: echomq.Connection, ks: Keyspace) -> dict[str, list[str]]:
    """Every non-empty lane of the queue: group -> ids in claim order."""
    out = {}
    prefix = ks.base + "g:"
    for key in await _keys(conn, ks):
        if key.startswith(prefix) and key.endswith(":pending"):
            group = key[len(prefix) : -len(":pending")]
            out[group] = [i.decode() for i in await conn.execute("ZRANGE", key, 0, -1)]
    return out


async def ring_of(conn: echomq.Connection, ks: Keyspace) -> list[str]:
    return [m.decode() for m in await conn.execute("ZRANGE", ks.ring, 0, -1)]


async def check_lanes(conn: echomq.Connection, queue: str) -> None:
    """Assert the lanes' invariants (docs/lanes.md, "Invariants")."""
    ks = Keyspace(queue)
    lanes = await lanes_of(conn, ks)
    waiting = int(await conn.execute("HGET", ks.meta, "lane_jobs") or 0)
    assert waiting == sum(len(ids) for ids in lanes.values()), (waiting, lanes)
    registry = {m.decode() for m in await conn.execute("ZRANGE", ks.groups, 0, -1)}
    held: Counter[str] = Counter()
    for job_id in await conn.execute("ZRANGE", ks.active, 0, -1):
        info = await jobs.get_job(conn, queue, job_id.decode())
        if info is not None and info.group is not None:
            held[info.group] += 1
    for group in set(lanes) | set(held) | registry:
        active = int(await conn.execute("HGET", ks.gstate, group) or 0)
        assert active == held[group], (group, active, held[group])
        if group in lanes or held[group]:
            assert group in registry, group
        else:
            assert group not in registry, group
    default = await conn.execute("HGET", ks.meta, "group_concurrency")
    for member in await ring_of(conn, ks):
        if member == "":
            continue
        assert member in lanes, member
        limit = await conn.execute("HGET", ks.gstate, member + ":limit") or default
        assert limit is None or held[member] < int(limit), (member, held[member], limit)
        assert await conn.execute("ZSCORE", ks.limited, member) is None, member
    for group, ids in lanes.items():
        for job_id in ids:
            info = await jobs.get_job(conn, queue, job_id)
            assert info is not None and info.group == group and info.state == "pending"
