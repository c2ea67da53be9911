"""The cluster wire against a private cluster: routing, pipelines, bad input, CLUSTERDOWN."""

from __future__ import annotations

import uuid

import pytest
import trio

import echomq
import echomq.sync
from echomq._scripts.calls import SCRIPTS
from echomq._wire.cluster import ClusterConnection
from echomq._wire.hashslots import key_slot
from echomq.errors import ClusterDown, ConnectionLost, CrossSlot, NotACluster, ServerError
from echomq.events import open_event_feed
from echomq.testing import RedisCluster, RedisServer, free_port, open_redis_cluster

from ._support import error_replies, until


async def test_each_command_goes_to_the_master_of_its_slot(redis_cluster: RedisCluster) -> None:
    tag = uuid.uuid4().hex[:8]
    keys = [f"route:{tag}:{i}" for i in range(60)]
    async with echomq.connect(redis_cluster.url) as conn:
        assert isinstance(conn, ClusterConnection)
        for i, key in enumerate(keys):
            assert await conn.execute("SET", key, i) == b"OK"
        assert [await conn.execute("GET", k) for k in keys] == [str(i).encode() for i in range(60)]
        assert conn.redirects == 0  # the layout was right from the start
    holders = set()
    for i, key in enumerate(keys):
        owner = redis_cluster.owner(key_slot(key))
        assert owner.execute("GET", key) == str(i).encode()  # asked directly, no redirect
        holders.add(owner)
    assert holders == set(redis_cluster.masters())  # 60 keys land on all three


async def test_keyless_commands_and_script_loading(redis_cluster: RedisCluster) -> None:
    """PING/TIME go to one master; SCRIPT LOAD reaches every master."""
    async with echomq.connect(redis_cluster.url) as conn:
        assert await conn.execute("PING") == b"PONG"
        seconds, _ = await conn.execute("TIME")
        assert int(seconds) > 0
        sha = await conn.execute("SCRIPT", "LOAD", "return 'routed'")
    for master in redis_cluster.masters():
        assert master.execute("SCRIPT", "EXISTS", sha) == [1]


async def test_a_pipeline_goes_to_its_slots_master(redis_cluster: RedisCluster) -> None:
    tag = "{" + uuid.uuid4().hex[:8] + "}"
    async with echomq.connect(redis_cluster.url) as conn:
        replies = await conn.execute_pipeline(
            [("RPUSH", f"{tag}l", "a", "b"), ("LRANGE", f"{tag}l", 0, -1), ("TIME",)]
        )
    assert replies[:2] == [2, [b"a", b"b"]]
    assert redis_cluster.owner(key_slot(tag)).execute("LLEN", f"{tag}l") == 2


async def test_a_cross_slot_pipeline_is_refused_before_any_io() -> None:
    url = f"redis+cluster://127.0.0.1:{free_port()}/?connect_timeout=5"
    async with echomq.connect(url) as conn:
        with trio.fail_after(1), pytest.raises(CrossSlot, match="one node"):
            await conn.execute_pipeline([("GET", "{a}x"), ("GET", "{b}x")])
        with pytest.raises(CrossSlot):
            await conn.execute_pipeline([("SCRIPT", "LOAD", "return 1")])


async def test_every_verb_script_runs_as_its_sharded_twin(redis_cluster: RedisCluster) -> None:
    """On a cluster the EVALSHA sent is the twin's sha (SPUBLISH); the plain one is never
    loaded by a verb."""
    queue = f"twin-{uuid.uuid4().hex[:8]}"
    async with echomq.connect(redis_cluster.url) as conn:
        await conn.execute("SCRIPT", "FLUSH")
        await echomq.jobs.enqueue(conn, queue, b"x")
    node = redis_cluster.owner(key_slot("{" + queue + "}"))
    script = SCRIPTS["enqueue"]
    assert script.sharded is not None
    assert node.execute("SCRIPT", "EXISTS", script.sharded.sha, script.sha) == [1, 0]


async def test_a_server_not_in_cluster_mode_is_a_typed_error(redis_server: RedisServer) -> None:
    url = f"redis+cluster://127.0.0.1:{redis_server.port}/"
    async with echomq.connect(url) as conn:
        with trio.fail_after(5), pytest.raises(NotACluster, match="not in cluster mode"):
            await conn.execute("PING")
    with pytest.raises(NotACluster):
        echomq.sync.connect(url).enqueue("q", b"x")


async def test_no_reachable_node_is_connection_lost_naming_the_nodes() -> None:
    ports = [free_port(), free_port()]
    url = f"redis+cluster://127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}/?connect_timeout=0.3"
    async with echomq.connect(url) as conn:
        with trio.fail_after(5), pytest.raises(ConnectionLost) as caught:
            await conn.execute("GET", "k")
    assert str(ports[0]) in str(caught.value) and str(ports[1]) in str(caught.value)
    with pytest.raises(ConnectionLost):
        echomq.sync.connect(url).enqueue("q", b"x")


async def test_uncovered_slots_retry_within_the_bound_then_raise_cluster_down() -> None:
    """CLUSTERDOWN (slots without a master) is retried until connect_timeout; a slot served
    again within it is answered; one that is not raises ClusterDown."""
    async with open_redis_cluster(masters=1) as cluster:
        (node,) = cluster.nodes
        async with echomq.connect(cluster.url, connect_timeout=0.5) as conn:
            await conn.execute("SET", "k", 1)
            node.execute("CLUSTER", "DELSLOTSRANGE", 0, 99)  # now the cluster is down
            with trio.fail_after(5), pytest.raises(ClusterDown, match="CLUSTERDOWN"):
                await conn.execute("GET", "k")
        async with echomq.connect(cluster.url, connect_timeout=10) as conn:
            got: list[object] = []
            async with trio.open_nursery() as nursery:

                async def get() -> None:
                    got.append(await conn.execute("GET", "k"))

                before = error_replies(node, "CLUSTERDOWN")
                nursery.start_soon(get)
                # refused, and sent again
                await until(lambda: error_replies(node, "CLUSTERDOWN") >= before + 2)
                assert not got
                node.execute("CLUSTER", "ADDSLOTSRANGE", 0, 99)
            assert got == [b"1"]


async def test_a_password_reaches_every_node_and_a_wrong_one_is_refused_at_once() -> None:
    async with open_redis_cluster(masters=2, password="s3cr3t") as cluster:
        queue = f"pw-{uuid.uuid4().hex[:8]}"
        async with echomq.connect(cluster.url) as conn, open_event_feed(cluster.url, queue) as feed:
            with feed.listen() as events:
                job_id = await echomq.jobs.enqueue(conn, queue, b"x")
                with trio.fail_after(5):
                    assert (await events.receive()).job == job_id
        assert echomq.sync.connect(cluster.url).get_job(queue, job_id) is not None
        wrong = cluster.url.replace("s3cr3t", "wrong")
        async with echomq.connect(wrong, connect_timeout=10) as conn:
            with trio.fail_after(5), pytest.raises(ServerError, match="WRONGPASS"):
                await conn.execute("PING")
