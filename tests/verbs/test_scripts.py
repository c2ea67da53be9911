"""The script runner: EVALSHA first, NOSCRIPT falls back once, unmapped errors stay ServerError."""

from __future__ import annotations

import pytest

import echomq
from echomq import jobs
from echomq._scripts.calls import SCRIPTS, is_sharded
from echomq._scripts.keyspace import Keyspace
from echomq.errors import ServerError

from ._support import on_queue_node


async def test_scripts_reload_after_script_flush(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """After SCRIPT FLUSH a verb still runs (EVAL loads it), then EVALSHA finds it again.

    On a cluster the flush reaches every master, and the script loaded is the sharded twin
    (SPUBLISH), on the queue's node.
    """
    await conn.execute("SCRIPT", "FLUSH")
    job_id = await jobs.enqueue(conn, queue, b"x")
    sha = SCRIPTS["enqueue"].variant(is_sharded(conn)).sha
    assert await on_queue_node(conn, ks, "SCRIPT", "EXISTS", sha) == [1]
    assert (await jobs.claim(conn, queue, 1_000))[0].id == job_id


async def test_unmapped_server_error_is_a_server_error(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A key of the wrong type is a ServerError (WRONGTYPE), not a typed refusal."""
    await conn.execute("SET", ks.pending, "not a zset")
    with pytest.raises(ServerError, match="WRONGTYPE"):
        await jobs.claim(conn, queue, 1_000)


def test_every_script_is_loaded_with_its_sha() -> None:
    """Each lua file is a Script named by its stem with the sha1 of its source."""
    import hashlib

    for name, script in SCRIPTS.items():
        assert script.name == name
        assert script.sha == hashlib.sha1(script.source.encode()).hexdigest()
    assert {"enqueue", "claim", "complete", "fail", "extend_lock", "extend_locks"} <= set(SCRIPTS)


async def test_a_kept_claim_call_reloads_after_script_flush(
    conn: echomq.Connection, queue: str
) -> None:
    """claim keeps its call packed per (queue, lease, count): a SCRIPT FLUSH between two
    claims with the same arguments still falls back to EVAL once."""
    first, second = [await jobs.enqueue(conn, queue, b"x") for _ in range(2)]
    assert (await jobs.claim(conn, queue, 1_000))[0].id == first
    await conn.execute("SCRIPT", "FLUSH")
    assert (await jobs.claim(conn, queue, 1_000))[0].id == second


@pytest.mark.parametrize(
    ("lease", "count"), [(1_000, True), (1_000.0, 1), (True, 1), (1_000, 0), (0, 1)]
)
async def test_claim_gates_every_call_even_when_an_equal_one_is_kept(
    conn: echomq.Connection, queue: str, lease: object, count: object
) -> None:
    """A kept claim call is keyed on exact types: ``True`` or ``1000.0`` (equal to a kept
    key) are still refused by the gate, every time, before any I/O."""
    await jobs.claim(conn, queue, 1_000, count=1)  # keeps (queue, 1000, 1)
    for _ in range(2):
        with pytest.raises(echomq.InvalidArgument):
            await jobs.claim(conn, queue, lease, count=count)  # type: ignore[arg-type]
        with pytest.raises(echomq.InvalidArgument):
            await jobs.claim_batch(conn, queue, lease, count=count)  # type: ignore[arg-type]
