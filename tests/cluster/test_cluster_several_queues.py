"""One worker serving two queues whose slots live on different masters (docs/queues.md):
each queue's claims go to its own master, every job of both completes, and the worker's
heartbeat record is on each queue."""

from __future__ import annotations

import uuid

import trio

import echomq
from echomq import admin
from echomq._scripts.keyspace import Keyspace
from echomq._wire.hashslots import key_slot
from echomq.testing import RedisCluster

from ._support import until


def _on_two_masters(cluster: RedisCluster) -> tuple[str, str]:
    """Two queue names whose keys sit on different masters."""
    base = f"mq-{uuid.uuid4().hex[:8]}"
    first = f"{base}-0"
    owner = cluster.owner(key_slot(Keyspace(first).pending)).server.port
    for n in range(1, 200):
        other = f"{base}-{n}"
        if cluster.owner(key_slot(Keyspace(other).pending)).server.port != owner:
            return first, other
    raise AssertionError("no second master found")


async def test_two_queues_on_two_masters_served_by_one_worker(
    redis_cluster: RedisCluster,
) -> None:
    names = _on_two_masters(redis_cluster)
    queues = [echomq.Queue(name, url=redis_cluster.url) for name in names]
    ran: list[str] = []
    tasks = []
    for q in queues:

        @q.task(name="work")
        async def work(job: echomq.Job, n: int) -> int:
            ran.append(job.queue)
            return n

        tasks.append(work)
    with trio.fail_after(60):
        async with queues[0].open(), queues[1].open():
            handles = [h for task in tasks for h in await task.map(range(100))]
            worker = echomq.Worker(queues, concurrency=8, weights=(1, 1))
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.serve)
                results = [await h.result(timeout=30) for h in handles]
                assert results == [*range(100), *range(100)]
                for q in queues:  # its record on each queue, on each master

                    async def listed(q: echomq.Queue = q) -> bool:
                        found = await admin.list_workers(q.connection, q.name)
                        return any(w.id == worker.id and w.queues == names for w in found.workers)

                    await until(listed, 10)
                stats = worker.statistics()
                worker.shutdown()
    assert sorted(ran) == sorted([names[0]] * 100 + [names[1]] * 100)
    assert all(claims > 0 for claims in stats.queue_claims)
    assert stats.completed == 200 and stats.lost == 0
