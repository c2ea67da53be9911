"""echomq.testing.RedisCluster: a private cluster that starts, serves every slot, and stops."""

from __future__ import annotations

import pytest

import echomq
from echomq.testing import RedisCluster, RedisServerError, open_redis_cluster


async def test_open_redis_cluster_serves_every_slot_then_stops() -> None:
    async with open_redis_cluster(masters=3) as cluster:
        nodes = list(cluster.nodes)
        masters = cluster.masters()
        assert len(nodes) == 3 and masters == nodes
        for node in nodes:
            info = node.info("cluster")
            assert info["cluster_state"] == "ok"
            assert info["cluster_slots_assigned"] == "16384"
        assert {cluster.owner(0), cluster.owner(16383)} <= set(masters)
        assert cluster.url.startswith("redis+cluster://127.0.0.1:")
        async with echomq.connect(cluster.url) as conn:
            assert await conn.execute("PING") == b"PONG"
    assert all(not node.running for node in nodes)


def test_replicas_follow_their_masters(redis_cluster: RedisCluster) -> None:
    """(the shared cluster has none; a 1+1 cluster has one replica in sync)"""
    assert all(not redis_cluster.replicas_of(m) for m in redis_cluster.masters())
    with RedisCluster(masters=1, replicas=1) as cluster:
        (master,) = cluster.masters()
        (replica,) = cluster.replicas_of(master)
        assert replica.role() == "slave"
        assert replica.info("replication")["master_link_status"] == "up"


def test_a_cluster_needs_a_master() -> None:
    with pytest.raises(RedisServerError):
        RedisCluster(masters=0).start()
