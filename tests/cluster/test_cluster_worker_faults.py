"""The worker while its queue's slot moves or its master fails over: what the wire gives up
on after ``connect_timeout`` (a reshard is slower than that) is transient to the worker,
which tries again within its own bounds; the lease protects the job meanwhile."""

from __future__ import annotations

import uuid

import pytest
import trio

import echomq
from echomq import jobs, stalled
from echomq._scripts.keyspace import Keyspace
from echomq._wire.hashslots import key_slot
from echomq.errors import NotActive, StaleToken
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


@pytest.mark.parametrize("change", ["failover", "migration"])
async def test_leases_from_before_a_failover_or_migration(
    fault_cluster: RedisCluster, change: str
) -> None:
    """The lease epoch is the run id of the master that granted the lease (docs/keyspace.md,
    "lease_epoch is per node"). After the slot's master changes (a replica promoted, or the
    slot moved): a holder that renews is re-stamped by the new master and settles as usual;
    a lease whose holder died is recovered without counting a stall, as after a restart,
    and its old token can never settle. The next claim is stamped with the new master's
    run id: from then on an expired lease counts."""
    queue = f"epoch-{uuid.uuid4().hex[:8]}"
    ks = Keyspace(queue)
    slot = key_slot(ks.pending)
    async with echomq.connect(fault_cluster.url, connect_timeout=5) as conn:
        dead_id = await jobs.enqueue(conn, queue, b"x")
        live_id = await jobs.enqueue(conn, queue, b"x")
        await jobs.enqueue(conn, queue, b"x", delay_ms=600_000)  # every declared key exists
        held, live = await jobs.claim(conn, queue, 300, count=2)
        assert (held.id, live.id) == (dead_id, live_id)
        owner = fault_cluster.owner(slot)
        if change == "failover":
            await trio.to_thread.run_sync(fault_cluster.failover, owner)
        else:
            target = next(m for m in fault_cluster.masters() if m is not owner)
            await trio.to_thread.run_sync(fault_cluster.migrate_slot, slot, target)
        with trio.fail_after(10):
            for job_id in (dead_id, live_id):
                e = await jobs.explain(conn, queue, job_id)
                assert e.job.lease_epoch is not None and e.epoch_current is False
            # the live holder renews (its lease may have lapsed meanwhile: not collected yet)
            await jobs.extend_lock(conn, queue, live_id, live.token, 60_000)
            assert (await jobs.explain(conn, queue, live_id)).epoch_current is True

            async def swept() -> stalled.Sweep:
                while True:
                    sweep = await stalled.check(conn, queue, max_stalled=1)
                    if sweep.recovered or sweep.dead:
                        return sweep
                    await trio.sleep(0.02)

            assert await swept() == stalled.Sweep(recovered=[dead_id], dead=[])
            info = await jobs.get_job(conn, queue, dead_id)
            assert info is not None and info.stalled == 0  # exempt: not counted
            with pytest.raises(NotActive):  # the dead holder's late settle
                await jobs.complete(conn, queue, dead_id, held.token, b"late")
            await jobs.complete(conn, queue, live_id, live.token, b"ok")
            [again] = await jobs.claim(conn, queue, 100)  # stamped by the new master
            assert again.id == dead_id and again.token == held.token + 1
            assert (await jobs.explain(conn, queue, dead_id)).epoch_current is True
            with pytest.raises(StaleToken):
                await jobs.complete(conn, queue, dead_id, held.token, b"late")
            assert await swept() == stalled.Sweep(recovered=[], dead=[dead_id])  # counted
            done = await jobs.get_job(conn, queue, live_id)
            assert done is not None and done.state == "completed" and done.result == b"ok"
