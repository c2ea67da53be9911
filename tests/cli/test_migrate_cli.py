"""``echomq migrate QUEUE``: a queue of data layout 1 rewritten (the rows' ``attempts``
become ``token``), said once; a current queue is left alone; an unknown one is exit 1."""

from __future__ import annotations

from test_cli import err, out, run

import echomq
from echomq import jobs
from echomq._scripts.calls import SCHEMA_VERSION
from echomq._scripts.keyspace import Keyspace


async def test_migrate_rewrites_a_layout_1_queue_then_has_nothing_to_do(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    ks = Keyspace(queue)
    await conn.execute("HSET", ks.meta, "schema_version", "1", "seq", "1")
    await conn.execute(
        "HSET", ks.job("a"), "state", "pending", "payload", "p", "attempts", "0",
        "failures", "0", "stalled", "0", "priority", "0", "max_attempts", "1",
    )  # fmt: skip
    await conn.execute("ZADD", ks.pending, "1", "a")

    p = await run(redis_url, "migrate", queue, "--budget", "10")
    assert p.returncode == 0, err(p)
    assert f"from data layout version 1 to {SCHEMA_VERSION}: 1 row(s) rewritten" in out(p)
    info = await jobs.get_job(conn, queue, "a")
    assert info is not None and info.token == 0
    assert await conn.execute("HGET", ks.job("a"), "attempts") is None

    again = await run(redis_url, "migrate", queue)
    assert again.returncode == 0, err(again)
    assert "nothing to do" in out(again)

    unknown = await run(redis_url, "migrate", queue + "-none")
    assert unknown.returncode == 1
    assert await conn.execute("EXISTS", Keyspace(queue + "-none").meta) == 0
