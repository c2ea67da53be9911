"""The cluster wire while the cluster changes: slot migration (MOVED, ASK, TRYAGAIN), a
coordinated failover under load, a killed master; sharded subscriptions that follow."""

from __future__ import annotations

import uuid

import pytest
import trio
import trio.testing

import echomq
from echomq import admin, jobs
from echomq._scripts.keyspace import Keyspace
from echomq._wire.cluster import ClusterConnection
from echomq._wire.dial import open_pubsub
from echomq._wire.hashslots import key_slot
from echomq.errors import ConnectionLost, InvalidArgument, ServerError
from echomq.events import open_event_feed
from echomq.testing import ClusterNode, RedisCluster

from ._support import error_replies, until


def other_master(cluster: RedisCluster, slot: int) -> ClusterNode:
    owner = cluster.owner(slot)
    return next(m for m in cluster.masters() if m is not owner)


def new_tag() -> str:
    return "{" + uuid.uuid4().hex[:10] + "}"


async def test_moved_after_a_migration_updates_the_layout(fault_cluster: RedisCluster) -> None:
    tag = new_tag()
    slot = key_slot(tag)
    async with echomq.connect(fault_cluster.url) as conn:
        assert isinstance(conn, ClusterConnection)
        await conn.execute("SET", f"{tag}a", "1")
        target = other_master(fault_cluster, slot)
        await trio.to_thread.run_sync(fault_cluster.migrate_slot, slot, target)
        assert await conn.execute("GET", f"{tag}a") == b"1"  # MOVED, then the new master
        assert conn.redirects == 1
        assert conn.slot_map is not None and conn.slot_map.owners[slot] == target.address
        assert await conn.execute("INCR", f"{tag}n") == 1  # straight there now
        assert conn.redirects == 1
    assert target.execute("GET", f"{tag}n") == b"1"


async def test_ask_during_a_migration_reaches_the_importing_node(
    fault_cluster: RedisCluster,
) -> None:
    """Mid-migration: a key already moved is ASKed for on the target; one not yet moved is
    served by the source; a new key goes to the target (ASKING + command in one write)."""
    tag = new_tag()
    slot = key_slot(tag)
    async with echomq.connect(fault_cluster.url) as conn:
        await conn.execute("SET", f"{tag}moved", "m")
        await conn.execute("SET", f"{tag}stays", "s")
        target = other_master(fault_cluster, slot)
        migration = fault_cluster.start_migration(slot, target)
        try:
            migration.move_keys([f"{tag}moved"])
            asks = error_replies(migration.source, "ASK")
            assert await conn.execute("GET", f"{tag}moved") == b"m"
            assert await conn.execute("GET", f"{tag}stays") == b"s"
            assert await conn.execute("SET", f"{tag}new", "n") == b"OK"
            assert error_replies(migration.source, "ASK") == asks + 2
            assert target.execute("CLUSTER", "COUNTKEYSINSLOT", slot) == 2  # moved + new
            replies = await conn.execute_pipeline([("GET", f"{tag}moved"), ("TIME",)])
            assert replies[0] == b"m"
        finally:
            await trio.to_thread.run_sync(migration.finish)
        assert await conn.execute("MGET", f"{tag}moved", f"{tag}stays", f"{tag}new") == [
            b"m",
            b"s",
            b"n",
        ]


async def test_tryagain_is_retried_until_the_migration_completes(
    fault_cluster: RedisCluster,
) -> None:
    """A multi-key command whose keys are split between source and target gets TRYAGAIN:
    sent again (with backoff) and answered once the migration is over."""
    tag = new_tag()
    slot = key_slot(tag)
    async with echomq.connect(fault_cluster.url, connect_timeout=10) as conn:
        await conn.execute("SET", f"{tag}a", "1")
        await conn.execute("SET", f"{tag}b", "2")
        migration = fault_cluster.start_migration(slot, other_master(fault_cluster, slot))
        migration.move_keys([f"{tag}a"])
        got: list[object] = []
        async with trio.open_nursery() as nursery:

            async def mget() -> None:
                got.append(await conn.execute("MGET", f"{tag}a", f"{tag}b"))

            before = error_replies(migration.source, "TRYAGAIN")
            nursery.start_soon(mget)
            await until(lambda: error_replies(migration.source, "TRYAGAIN") >= before + 2)
            assert not got
            await trio.to_thread.run_sync(migration.finish)
        assert got == [[b"1", b"2"]]


async def test_a_coordinated_failover_under_load_runs_every_command_once(
    fault_cluster: RedisCluster,
) -> None:
    """CLUSTER FAILOVER while 20 tasks INCR keys of the master that hands over: every
    INCR answered runs exactly once (the counters add up), and none fails."""
    tag = new_tag()
    slot = key_slot(tag)
    master = fault_cluster.owner(slot)
    done = 0
    async with echomq.connect(fault_cluster.url) as conn:
        assert isinstance(conn, ClusterConnection)
        stop = trio.Event()

        async def hammer(i: int) -> None:
            nonlocal done
            while not stop.is_set():
                await conn.execute("INCR", f"{tag}{i % 4}")
                done += 1
                await trio.lowlevel.checkpoint()

        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(hammer, i)
            await until(lambda: done > 200)
            new_master = await trio.to_thread.run_sync(fault_cluster.failover, master)
            mark = done
            await until(lambda: done > mark + 200)  # still going on the new master
            stop.set()
        counts = [int(await conn.execute("GET", f"{tag}{k}")) for k in range(4)]
        assert sum(counts) == done
        assert conn.slot_map is not None and conn.slot_map.owners[slot] == new_master.address
        assert conn.redirects >= 1


async def test_a_killed_master_fails_commands_in_flight_and_replays_none(
    fault_cluster: RedisCluster,
) -> None:
    """SIGKILL with a pipeline in flight (an INCR queued behind a BLPOP): ConnectionLost;
    its replica takes over, and the INCR was never sent again."""
    tag = new_tag()
    slot = key_slot(tag)
    master = fault_cluster.owner(slot)
    (replica,) = fault_cluster.replicas_of(master)
    async with echomq.connect(fault_cluster.url, connect_timeout=10) as conn:
        await conn.execute("SET", f"{tag}seen", 1)
        assert await conn.execute_at(f"{tag}seen", "WAIT", 1, 5000) == 1  # replicated
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                lost: list[BaseException] = []

                async def in_flight() -> None:
                    try:
                        await conn.execute_pipeline(
                            [("BLPOP", f"{tag}never", 30), ("INCR", f"{tag}count")]
                        )
                    except ConnectionLost as exc:
                        lost.append(exc)

                nursery.start_soon(in_flight)
                await until(lambda: master.info("clients")["blocked_clients"] == "1")
                fault_cluster.kill(master)
            assert len(lost) == 1
        await trio.to_thread.run_sync(fault_cluster.wait_for_owner, slot, replica)
        assert await conn.execute("GET", f"{tag}count") is None  # never replayed
        assert await conn.execute("GET", f"{tag}seen") == b"1"
        assert await conn.execute("INCR", f"{tag}count") == 1
    await trio.to_thread.run_sync(fault_cluster.restart, master)  # back, as a replica
    assert master.role() == "slave"


async def test_sharded_subscriptions_follow_migrations_and_failovers(
    fault_cluster: RedisCluster,
) -> None:
    """A queue's event feed SSUBSCRIBEs on its master; after the slot moves, and after that
    master fails over, it is subscribed where the slot is served and receives again."""
    queue = f"feed-{uuid.uuid4().hex[:8]}"
    slot = key_slot("{" + queue + "}")
    async with echomq.connect(fault_cluster.url) as conn:
        async with open_event_feed(fault_cluster.url, queue) as feed:
            with feed.listen(events={"enqueued"}) as events:

                async def roundtrip() -> None:
                    # Events are at most once: one published while the feed's new
                    # SSUBSCRIBE is still on its way is lost. "Receives again" means one of
                    # a few enqueued within the bound arrives.
                    sent: set[str] = set()
                    with trio.fail_after(5):
                        while True:
                            sent.add(await jobs.enqueue(conn, queue, b"x"))
                            with trio.move_on_after(0.5):
                                assert (await events.receive()).job in sent
                                return

                await roundtrip()
                target = other_master(fault_cluster, slot)
                await trio.to_thread.run_sync(fault_cluster.migrate_slot, slot, target)
                await until(lambda: feed.reconnects == 1)
                await roundtrip()
                await trio.to_thread.run_sync(fault_cluster.failover, target)
                await until(lambda: feed.reconnects == 2)
                await roundtrip()


async def test_patterns_are_refused_on_a_cluster(redis_cluster: RedisCluster) -> None:
    async with open_pubsub(redis_cluster.url) as pubsub:
        with pytest.raises(InvalidArgument, match="pattern"):
            await pubsub.psubscribe("emq:*")


async def test_a_claim_with_the_queue_split_by_a_migration_loses_no_job(
    fault_cluster: RedisCluster,
) -> None:
    """A reshard that moves a queue's keys in batches (redis-cli's default) can split a job's
    row from the pending set for a moment. A claim then must change nothing: it reads every
    row it will touch before its first write (docs/lua.md, rule 1)."""
    queue = f"split-{uuid.uuid4().hex[:8]}"
    ks = Keyspace(queue)
    slot = key_slot(ks.pending)
    async with echomq.connect(fault_cluster.url, connect_timeout=1) as conn:
        ids = [await jobs.enqueue(conn, queue, b"x") for _ in range(3)]
        await jobs.enqueue(conn, queue, b"x", delay_ms=600_000)  # every declared key exists
        await conn.execute("RPUSH", ks.wake, 1)
        await jobs.claim(conn, queue, 600_000)
        migration = fault_cluster.start_migration(slot, other_master(fault_cluster, slot))
        try:
            migration.move_keys([ks.job(ids[1])])  # one row goes first
            with pytest.raises(ServerError):
                await jobs.claim(conn, queue, 600_000, count=2)
            pending = await conn.execute("ZRANGE", ks.pending, 0, -1)
            active = await conn.execute("ZRANGE", ks.active, 0, -1)
        finally:
            await trio.to_thread.run_sync(migration.finish)
        assert sorted(pending) == sorted(i.encode() for i in ids[1:])
        assert active == [ids[0].encode()]
        assert [c.id for c in await jobs.claim(conn, queue, 600_000, count=2)] == ids[1:]


@pytest.mark.parametrize("moved", ["capped row", "completions stream"])
async def test_a_complete_whose_finish_meets_a_moved_key_changes_nothing(
    fault_cluster: RedisCluster, moved: str
) -> None:
    """complete reads every key its finish touches (the rows the count guard will delete,
    the derived completions stream and counters) before its first write."""
    queue = f"split-{uuid.uuid4().hex[:8]}"
    ks = Keyspace(queue)
    slot = key_slot(ks.pending)
    async with echomq.connect(fault_cluster.url, connect_timeout=1) as conn:
        await admin.ensure_schema(conn, queue)  # the queue exists first
        await admin.set_retention(conn, queue, max_completed=1)
        first, second = [await jobs.enqueue(conn, queue, b"x") for _ in range(2)]
        [one] = await jobs.claim(conn, queue, 600_000)
        await jobs.complete(conn, queue, one.id, one.token, b"r")
        [two] = await jobs.claim(conn, queue, 600_000)
        migration = fault_cluster.start_migration(slot, other_master(fault_cluster, slot))
        try:
            key = ks.job(first) if moved == "capped row" else ks.completions
            migration.move_keys([key])
            with pytest.raises(ServerError):
                await jobs.complete(conn, queue, two.id, two.token, b"r")
            active = await conn.execute("ZRANGE", ks.active, 0, -1)
            state = await conn.execute("HGET", ks.job(second), "state")
        finally:
            await trio.to_thread.run_sync(migration.finish)
        assert (active, state) == ([second.encode()], b"active")
        await jobs.complete(conn, queue, two.id, two.token, b"r")
        assert await conn.execute("ZRANGE", ks.completed, 0, -1) == [second.encode()]
        assert await conn.execute("XLEN", ks.completions) == 2


async def test_a_drain_that_meets_a_moved_row_changes_nothing(
    fault_cluster: RedisCluster,
) -> None:
    """drain reads every row, log list and lock it will delete before its first write (it
    deletes them 100 jobs per DEL: a moved row in the second hundred must stop it first)."""
    queue = f"split-{uuid.uuid4().hex[:8]}"
    ks = Keyspace(queue)
    slot = key_slot(ks.pending)
    async with echomq.connect(fault_cluster.url, connect_timeout=1) as conn:
        ids = await jobs.enqueue_many(conn, queue, [jobs.NewJob(payload=b"x")] * 150)
        await jobs.enqueue(conn, queue, b"x", delay_ms=600_000)  # every declared key exists
        migration = fault_cluster.start_migration(slot, other_master(fault_cluster, slot))
        try:
            migration.move_keys([ks.job(ids[120])])
            with pytest.raises(ServerError):
                await admin.drain_step(conn, queue)
            pending = await conn.execute("ZCARD", ks.pending)
            first_row = await conn.execute("EXISTS", ks.job(ids[0]))
        finally:
            await trio.to_thread.run_sync(migration.finish)
        assert (pending, first_row) == (150, 1)
        assert await admin.drain(conn, queue) == 150


async def test_a_script_that_meets_a_key_not_local_is_sent_again_after_the_move(
    fault_cluster: RedisCluster,
) -> None:
    """Mid-migration, enqueue's read of a new row is "not local" (the slot is migrating
    and the key is not here): the script stopped before its first write, so the wire sends
    it again until the slot has moved, within connect_timeout."""
    queue = f"split-{uuid.uuid4().hex[:8]}"
    ks = Keyspace(queue)
    slot = key_slot(ks.pending)
    async with echomq.connect(fault_cluster.url, connect_timeout=5) as conn:
        await jobs.enqueue(conn, queue, b"x")
        await jobs.enqueue(conn, queue, b"x", delay_ms=600_000)  # every declared key exists
        migration = fault_cluster.start_migration(slot, other_master(fault_cluster, slot))
        async with echomq.connect(fault_cluster.url, connect_timeout=0.1) as hasty:
            with pytest.raises(ServerError, match="non local key"):
                await jobs.enqueue(hasty, queue, b"y")  # refused while the slot moves
        found: list[str] = []
        async with trio.open_nursery() as nursery:

            async def enqueue() -> None:
                found.append(await jobs.enqueue(conn, queue, b"y"))

            nursery.start_soon(enqueue)
            await trio.testing.wait_all_tasks_blocked(cushion=0.05)  # refused once, waiting
            assert not found
            await trio.to_thread.run_sync(migration.finish)
        info = await jobs.get_job(conn, queue, found[0])
        assert info is not None and info.state == "pending"
