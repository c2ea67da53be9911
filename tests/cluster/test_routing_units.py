"""Cluster routing without a server: slots, command keys, layouts, redirects, URLs, scripts."""

from __future__ import annotations

import pytest

from echomq._scripts.calls import SCRIPTS, sharded_source
from echomq._scripts.keyspace import Keyspace
from echomq._wire.hashslots import (
    ALL_MASTERS,
    ANY_MASTER,
    command_slot,
    crc16,
    key_slot,
    pipeline_slot,
)
from echomq._wire.topology import SlotMap, parse_redirect, parse_shards, parse_slots
from echomq.config import parse_url
from echomq.errors import InvalidArgument


def test_crc16_and_slots_match_the_cluster_spec() -> None:
    assert crc16(b"123456789") == 0x31C3  # the spec's check value
    assert key_slot("123456789") == 12739
    assert key_slot("foo") == 12182
    assert key_slot(b"bar") == 5061


@pytest.mark.parametrize(
    ("key", "hashed"),
    [
        ("{user1000}.following", "user1000"),
        ("foo{bar}{zap}", "bar"),  # the first tag only
        ("foo{}{bar}", "foo{}{bar}"),  # an empty tag: the whole key
        ("foo{{bar}}zap", "{bar"),
        ("no tag", "no tag"),
    ],
)
def test_hash_tags(key: str, hashed: str) -> None:
    assert key_slot(key) == key_slot(hashed.encode()) == crc16(hashed.encode()) % 16384


def test_every_key_of_a_queue_is_in_one_slot() -> None:
    ks = Keyspace("emails")
    slot = key_slot("{emails}")
    keys = [ks.pending, ks.active, ks.schedule, ks.dead, ks.completed, ks.meta, ks.events]
    keys += [ks.wake, ks.wake_direct("c1"), ks.job("j1"), ks.logs("j1"), ks.lock("j1")]
    assert {key_slot(k) for k in keys} == {slot}


def test_a_command_goes_to_its_first_key() -> None:
    assert command_slot(("GET", "k")) == key_slot("k")
    assert command_slot(("get", b"k")) == key_slot("k")
    assert command_slot(("EVALSHA", "ab", 2, "{q}:a", "{q}:b", "x")) == key_slot("q")
    assert command_slot(("FCALL", "f", "1", "{q}:a")) == key_slot("q")
    assert command_slot(("XREAD", "COUNT", 1, "STREAMS", "{s}x", "0")) == key_slot("s")
    assert command_slot(("BLPOP", "{q}:wake", "{q}:wake:c", 1)) == key_slot("q")
    assert command_slot(("MEMORY", "USAGE", "k")) == key_slot("k")


def test_keyless_and_every_master_commands() -> None:
    for args in [("PING",), ("TIME",), ("INFO", "server"), ("EVAL", "return 1", 0)]:
        assert command_slot(args) == ANY_MASTER
    for args in [("SCRIPT", "LOAD", "return 1"), ("FUNCTION", "LOAD", "x"), ("FLUSHALL",)]:
        assert command_slot(args) == ALL_MASTERS
    assert command_slot(("SCRIPT", "EXISTS", "ab")) == ANY_MASTER


def test_scan_with_a_literal_tag_goes_to_that_slot() -> None:
    assert command_slot(("SCAN", 0, "MATCH", "emq:{q}:*", "COUNT", 10)) == key_slot("q")
    assert command_slot(("SCAN", 0, "MATCH", "emq:{*}:meta")) == ANY_MASTER
    assert command_slot(("SCAN", 0, "MATCH", "*{q}*")) == ANY_MASTER  # a glob before the tag
    assert command_slot(("SCAN", 0)) == ANY_MASTER


def test_a_pipeline_maps_to_one_slot_or_is_refused() -> None:
    assert pipeline_slot([("BLPOP", "{q}:w", 1), ("EVALSHA", "s", 1, "{q}:p")]) == key_slot("q")
    assert pipeline_slot([("TIME",), ("GET", "{q}a")]) == key_slot("q")
    assert pipeline_slot([("TIME",), ("PING",)]) == ANY_MASTER
    with pytest.raises(ValueError, match="slots"):
        pipeline_slot([("GET", "{a}x"), ("GET", "{b}x")])
    with pytest.raises(ValueError, match="every master"):
        pipeline_slot([("SCRIPT", "LOAD", "return 1")])


def test_layout_from_cluster_shards_and_cluster_slots() -> None:
    def node(port: int, role: str, health: str = "online", endpoint: bytes = b"10.0.0.1") -> list:
        fields = {"id": f"id{port}", "port": port, "ip": "10.0.0.1", "endpoint": endpoint}
        fields |= {"role": role, "health": health}
        return [x.encode() if isinstance(x, str) else x for kv in fields.items() for x in kv]

    shards = parse_shards(
        [
            [b"slots", [0, 99, 200, 16383], b"nodes", [node(1, "master"), node(2, "replica")]],
            [b"slots", [100, 199], b"nodes", [node(3, "master", endpoint=b"?")]],
            [b"slots", [], b"nodes", [node(4, "master")]],  # no slots: not a shard that serves
        ],
        "seed",
    )
    layout = SlotMap(shards)
    assert layout.owners[0] == layout.owners[16383] == ("10.0.0.1", 1)
    assert layout.owners[150] == ("seed", 3)  # unknown endpoint: the host we asked
    assert layout.masters == [("10.0.0.1", 1), ("seed", 3)]
    assert shards[0].replicas == (("10.0.0.1", 2),)
    assert layout.covered

    failed = SlotMap(
        parse_shards([[b"slots", [0, 16383], b"nodes", [node(1, "master", "fail")]]], "s")
    )
    assert failed.owners[5] is None and not failed.covered

    legacy = SlotMap(
        parse_slots(
            [[0, 8191, [b"h", 1, b"a"], [b"h", 2, b"b"]], [8192, 16383, [b"", 3, b"c"]]], "seed"
        )
    )
    assert legacy.owners[8191] == ("h", 1) and legacy.owners[8192] == ("seed", 3)
    legacy.move(8192, ("h", 1))
    assert legacy.owners[8192] == ("h", 1) and legacy.masters == [("h", 1), ("seed", 3)]


def test_redirect_replies() -> None:
    moved = parse_redirect("MOVED 3999 127.0.0.1:6381", "asked")
    assert moved is not None and (moved.kind, moved.slot, moved.address) == (
        "MOVED",
        3999,
        ("127.0.0.1", 6381),
    )
    ask = parse_redirect("ASK 1 :7000", "asked")
    assert ask is not None and ask.address == ("asked", 7000)
    assert parse_redirect("ERR something", "asked") is None


def test_cluster_urls() -> None:
    config = parse_url("redis+cluster://u:p%40ss@h1:7000,h2:7001/?connect_timeout=2")
    assert config.cluster and config.cluster_nodes == (("h1", 7000), ("h2", 7001))
    assert (config.username, config.password, config.connect_timeout) == ("u", "p@ss", 2.0)
    assert config.display == "redis+cluster://h1:7000,h2:7001/"
    assert parse_url("rediss+cluster://[::1]:7000,h").cluster_nodes == (("::1", 7000), ("h", 6379))
    assert parse_url("rediss+cluster://h").tls
    node = config.for_node("h2", 7001)
    assert not node.cluster and (node.host, node.port, node.password) == ("h2", 7001, "p@ss")
    assert not parse_url("redis://h:1/0").cluster


@pytest.mark.parametrize(
    "url",
    ["redis+cluster:///", "redis+cluster://h:1/2", "redis+cluster://h:x", "redis+cluster://h:0"],
)
def test_bad_cluster_urls_are_refused(url: str) -> None:
    with pytest.raises(InvalidArgument):
        parse_url(url)


def test_every_publishing_script_has_a_sharded_twin() -> None:
    for script in SCRIPTS.values():
        publishes = "PUBLISH" in script.source
        assert (script.sharded is not None) == publishes, script.name
        if script.sharded is not None:
            twin = script.sharded.source
            assert twin.count("SPUBLISH") == script.source.count("PUBLISH")
            plain = twin.replace("SPUBLISH", "PUBLISH").replace("SHARDNUMSUB", "NUMSUB")
            assert plain == script.source
            assert twin.count("SHARDNUMSUB") == script.source.count("'NUMSUB'")
            assert script.sharded.sha != script.sha
        assert script.variant(False) is script
    assert sharded_source('redis.call( "PUBLISH", c, m)') == 'redis.call( "SPUBLISH", c, m)'
    assert sharded_source("redis.call('PUBSUB', 'NUMSUB', c)") == (
        "redis.call('PUBSUB', 'SHARDNUMSUB', c)"
    )
