"""The worker while its queue's slot moves or its master fails over: what the wire gives up
on after ``connect_timeout`` (a reshard is slower than that) is transient to the worker,
which tries again within its own bounds; the lease protects the job meanwhile."""

from __future__ import annotations

import uuid

import trio

import echomq
from echomq import jobs
from echomq._redis.keyspace import Keyspace
from echomq._redis.slots import key_slot
from echomq.testing import RedisCluster

from ._support import error_replies, until


async def test_a_settle_refused_by_a_long_reshard_is_retried_not_dead_lettered(
    fault_cluster: RedisCluster,
) -> None:
    """The job's row moves first (a reshard moves keys in batches): complete meets TRYAGAIN
    for longer than the worker's connect_timeout. The settle path tries again (within
    settle_timeout) instead of failing the job dead, and completes it once the slot moved."""
    queue = f"settle-{uuid.uuid4().hex[:8]}"
    ks = Keyspace(queue)
    slot = key_slot(ks.pending)
    q = echomq.Queue(queue, url=f"{fault_cluster.url}?connect_timeout=0.2")
    started, release = trio.Event(), trio.Event()

    @q.task(lease=30.0)
    async def hold() -> str:
        started.set()
        await release.wait()
        return "done"

    worker = echomq.Worker(q, concurrency=1)
    with trio.fail_after(30):
        async with q.open(), echomq.connect(fault_cluster.url) as conn:
            await hold.apply()
            (job_id,) = await conn.execute("ZRANGE", ks.pending, 0, -1)
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.serve)
                await started.wait()
                source = fault_cluster.owner(slot)
                target = next(m for m in fault_cluster.masters() if m is not source)
                migration = fault_cluster.start_migration(slot, target)
                try:
                    migration.move_keys([ks.job(job_id.decode())])
                    before = error_replies(source, "TRYAGAIN")
                    release.set()
                    # well past two connect_timeouts of refusals: the settle keeps trying
                    await until(lambda: error_replies(source, "TRYAGAIN") >= before + 25, 10)
                finally:
                    await trio.to_thread.run_sync(migration.finish)
                await until(lambda: worker.statistics().completed == 1, 10)
                stats = worker.statistics()
                worker.shutdown(grace=1)
            info = await jobs.get_job(conn, queue, job_id.decode())
            assert info is not None and info.state == "completed", info
            assert (stats.failed, stats.retried, stats.lost) == (0, 0, 0)
