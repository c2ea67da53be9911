"""The cluster's live test (docs/wire.md, "Redis Cluster"): a worker runs 2,000 jobs on a
cluster while the queue's slot moves to another master and then that master fails over to
its replica. Every job completes, and its task ran exactly once; no holder ever settled with
a stale token."""

from __future__ import annotations

import uuid
from collections import Counter

import trio

import echomq
from echomq import jobs
from echomq._scripts.keyspace import Keyspace
from echomq._wire.hashslots import key_slot
from echomq.testing import RedisCluster

from ._support import until

JOBS = 2_000
LATE = 500  # enqueued while the slot moves (producers keep going too)


async def test_2000_jobs_complete_exactly_once_through_a_migration_and_a_failover(
    fault_cluster: RedisCluster,
) -> None:
    queue = f"live-{uuid.uuid4().hex[:8]}"
    ks = Keyspace(queue)
    slot = key_slot(ks.pending)
    q = echomq.Queue(queue, url=fault_cluster.url)
    runs: Counter[str] = Counter()

    @q.task(lease=5.0)
    async def work(job: echomq.Job, n: int) -> int:
        runs[job.id] += 1
        await trio.sleep(0.001)
        return n

    def batch(start: int, count: int) -> list[jobs.NewJob]:
        return [work.new_job((n,)) for n in range(start, start + count)]

    worker = echomq.Worker(q, concurrency=32, recovery="stalled", recovery_interval=0.2)
    with trio.fail_after(120):
        async with q.open(), echomq.connect(fault_cluster.url) as conn:
            ids: list[str] = []
            for start in range(0, JOBS - LATE, 250):
                ids += await jobs.enqueue_many(conn, queue, batch(start, 250))
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.serve)

                def completed() -> int:
                    return worker.statistics().completed

                source = fault_cluster.owner(slot)
                target = next(m for m in fault_cluster.masters() if m is not source)
                await until(lambda: completed() >= 300, within=30)
                migration = fault_cluster.start_migration(slot, target)
                late = [work.new_job((n,)) for n in range(JOBS - LATE, JOBS)]
                async with trio.open_nursery() as producers:

                    async def produce() -> None:
                        for i in range(0, LATE, 50):
                            ids.extend(await jobs.enqueue_many(conn, queue, late[i : i + 50]))

                    producers.start_soon(produce)
                    await trio.to_thread.run_sync(migration.finish)
                moved_at = completed()
                assert fault_cluster.owner(slot) is target

                await until(lambda: completed() >= moved_at + 300, within=30)
                new_master = await trio.to_thread.run_sync(fault_cluster.failover, target)
                assert fault_cluster.owner(slot) is new_master

                await until(lambda: completed() >= JOBS, within=60)
                stats = worker.statistics()
                worker.shutdown(grace=1)

            assert len(ids) == len(set(ids)) == JOBS
            assert set(runs) == set(ids)
            assert set(runs.values()) == {1}  # each task ran exactly once
            assert (stats.completed, stats.failed, stats.retried, stats.lost) == (JOBS, 0, 0, 0)
            assert stats.recovered == stats.dead_lettered == stats.helper_restarts == 0
            assert await conn.execute("ZCARD", ks.completed) == JOBS
            assert await conn.execute("HGET", ks.metrics_completed, "count") == str(JOBS).encode()
            for job_id in ids[:: JOBS // 50]:
                info = await jobs.get_job(conn, queue, job_id)
                assert info is not None and info.state == "completed" and info.token == 1
