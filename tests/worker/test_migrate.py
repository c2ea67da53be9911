"""A queue of data layout 1 (rows written by raw commands, the fencing token in their
``attempts``): a worker refuses it; after ``admin.migrate`` a worker runs its jobs."""

from __future__ import annotations

import pytest
import trio

import echomq
from echomq import admin, jobs
from echomq._scripts.keyspace import Keyspace
from echomq.errors import SchemaMismatch

from ._runtime import serving, wait_state


async def test_a_worker_refuses_layout_1_then_runs_its_jobs_once_migrated(
    redis_url: str, queue: str
) -> None:
    q = echomq.Queue(queue, url=redis_url)
    ran: list[tuple[int, int]] = []

    @q.task(name="migrated.double")
    async def double(job: echomq.Job, n: int) -> int:
        ran.append((n, job.token))
        return n * 2

    ks = Keyspace(queue)
    ids = [f"old{i}" for i in range(5)]
    async with echomq.connect(redis_url) as conn:
        await conn.execute("HSET", ks.meta, "schema_version", "1", "seq", str(len(ids)))
        for i, job_id in enumerate(ids):
            payload = q.codec.encode_call("migrated.double", [i], {})
            await conn.execute(
                "HSET", ks.job(job_id), "state", "pending", "payload", payload,
                "attempts", "0", "failures", "0", "stalled", "0", "priority", "0",
                "max_attempts", "1", "created_at", "1",
            )  # fmt: skip
            await conn.execute("ZADD", ks.pending, str(i + 1), job_id)

        with trio.fail_after(10), pytest.raises(SchemaMismatch, match="echomq migrate"):
            try:
                await echomq.Worker(q).serve()
            except BaseExceptionGroup as group:
                raise group.exceptions[0] from None
        assert ran == []
        assert (await jobs.get_job(conn, queue, ids[0])).state == "pending"  # type: ignore[union-attr]

        assert await admin.migrate(conn, queue) == len(ids)
        with trio.fail_after(10):
            async with q.open(), serving(echomq.Worker(q)):
                infos = [await wait_state(conn, queue, job_id, "completed") for job_id in ids]
    assert sorted(ran) == [(i, 1) for i in range(len(ids))]
    assert [info.token for info in infos] == [1] * len(ids)
    assert [q.codec.decode_result(info.result or b"") for info in infos] == [0, 2, 4, 6, 8]
