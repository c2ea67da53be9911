"""The blocking producer (``echomq.sync``, redis-py's RedisCluster) while a slot moves: a
script refused as "non local key" (or ``TRYAGAIN``) did not run, so it is sent again until
the slot has moved, within ``connect_timeout``, as on the trio wire; past it, the same
transient error (``Unavailable``)."""

from __future__ import annotations

import threading
import uuid

import pytest
import trio

import echomq
import echomq.sync
from echomq import jobs
from echomq._scripts.keyspace import Keyspace
from echomq._wire.hashslots import key_slot
from echomq.errors import TRANSIENT, Unavailable
from echomq.testing import RedisCluster

from ._support import error_replies, until


async def test_a_sync_enqueue_refused_mid_migration_is_sent_again_after_the_move(
    fault_cluster: RedisCluster,
) -> None:
    queue = f"sync-{uuid.uuid4().hex[:8]}"
    ks = Keyspace(queue)
    slot = key_slot(ks.pending)
    async with echomq.connect(fault_cluster.url) as conn:
        await jobs.enqueue(conn, queue, b"x")
        await jobs.enqueue(conn, queue, b"x", delay_ms=600_000)  # every declared key exists
        source = fault_cluster.owner(slot)
        target = next(m for m in fault_cluster.masters() if m is not source)
        migration = fault_cluster.start_migration(slot, target)
        try:
            with echomq.sync.connect(fault_cluster.url, connect_timeout=0.1) as hasty:
                with pytest.raises(Unavailable, match="non local key") as refused:
                    await trio.to_thread.run_sync(hasty.enqueue, queue, b"y")
                assert isinstance(refused.value, TRANSIENT)
            found: list[str] = []
            failed: list[BaseException] = []
            with echomq.sync.connect(fault_cluster.url, connect_timeout=10) as patient:
                patient.get_job(queue, "warm-up")  # the layout read before we count

                def enqueue() -> None:
                    try:
                        found.append(patient.enqueue(queue, b"z"))
                    except BaseException as exc:
                        failed.append(exc)

                before = error_replies(source, "ERR")
                thread = threading.Thread(target=enqueue)
                thread.start()
                try:
                    await until(lambda: error_replies(source, "ERR") >= before + 2 or bool(failed))
                    assert not failed and not found  # refused twice, still waiting
                finally:
                    await trio.to_thread.run_sync(migration.finish)
                    await trio.to_thread.run_sync(thread.join, 10)
        finally:
            if fault_cluster.owner(slot) is not target:
                await trio.to_thread.run_sync(migration.finish)
        assert not failed, failed
        info = await jobs.get_job(conn, queue, found[0])
        assert info is not None and info.state == "pending" and info.payload == b"z"
