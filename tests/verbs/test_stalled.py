"""stalled.check: the count-thresholded sweep, its limit, ghosts and the restart exemption."""

from __future__ import annotations

import json
import re

import echomq
from echomq import jobs, stalled
from echomq._scripts.keyspace import Keyspace

from ._support import claim_one, field, lapse, snapshot


async def _stall(conn: echomq.Connection, queue: str, ks: Keyspace) -> str:
    """Enqueue, claim with a short lease, and wait for it to lapse; answer the id."""
    job_id = await jobs.enqueue(conn, queue, b"x")
    await claim_one(conn, queue, lease_ms=20)
    await lapse(conn, ks, job_id)
    return job_id


async def test_threshold_one_dead_letters_the_first_stall(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """At max_stalled=1 a counted stall goes to dead with last_error 'stalled'."""
    job_id = await _stall(conn, queue, ks)
    sweep = await stalled.check(conn, queue)
    assert sweep == echomq.Sweep(recovered=[], dead=[job_id])
    assert await field(conn, ks, job_id, "state") == b"dead"
    assert await field(conn, ks, job_id, "last_error") == b"stalled"
    assert await field(conn, ks, job_id, "stalled") == b"1"
    assert await conn.execute("ZSCORE", ks.dead, job_id) is not None
    assert await conn.execute("ZSCORE", ks.active, job_id) is None
    assert await conn.execute("HGET", ks.metrics_dead, "count") == b"1"


async def test_threshold_two_recovers_once_then_dead_letters(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """At max_stalled=2 the first stall is recovered (counted), the second is dead."""
    job_id = await _stall(conn, queue, ks)
    first = await stalled.check(conn, queue, max_stalled=2)
    assert first == echomq.Sweep(recovered=[job_id], dead=[])
    assert await field(conn, ks, job_id, "state") == b"pending"
    assert await field(conn, ks, job_id, "stalled") == b"1"
    assert await conn.execute("ZSCORE", ks.pending, job_id) is not None
    assert await conn.execute("LLEN", ks.wake) >= 1

    again = await claim_one(conn, queue, lease_ms=20)
    assert again.token == 2
    await lapse(conn, ks, job_id)
    second = await stalled.check(conn, queue, max_stalled=2)
    assert second == echomq.Sweep(recovered=[], dead=[job_id])
    assert await field(conn, ks, job_id, "stalled") == b"2"
    assert await field(conn, ks, job_id, "last_error") == b"stalled"


async def test_limit_bounds_one_sweep(conn: echomq.Connection, queue: str, ks: Keyspace) -> None:
    """A sweep handles at most `limit` expired leases; the rest wait for the next one."""
    ids = await jobs.enqueue_many(conn, queue, [jobs.NewJob(payload=b"x") for _ in range(3)])
    await jobs.claim(conn, queue, 20, count=3)
    await lapse(conn, ks, *ids)
    first = await stalled.check(conn, queue, max_stalled=5, limit=2)
    assert len(first.recovered) == 2
    assert await conn.execute("ZCARD", ks.active) == 1
    second = await stalled.check(conn, queue, max_stalled=5, limit=2)
    assert sorted(first.recovered + second.recovered) == sorted(ids)


async def test_unexpired_leases_are_untouched(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A lease ahead of the server clock is not counted or moved."""
    await jobs.enqueue(conn, queue, b"x")
    await claim_one(conn, queue, lease_ms=60_000)
    before = await snapshot(conn, ks)
    assert await stalled.check(conn, queue) == echomq.Sweep(recovered=[], dead=[])
    assert await snapshot(conn, ks) == before


async def test_ghost_id_leaves_active_and_no_row_is_written(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """An active id with no row is removed from active, listed nowhere, and gets no row."""
    await conn.execute("ZADD", ks.active, 0, "ghost")
    sweep = await stalled.check(conn, queue)
    assert sweep == echomq.Sweep(recovered=[], dead=[])
    assert await conn.execute("ZSCORE", ks.active, "ghost") is None
    assert await conn.execute("EXISTS", ks.job("ghost")) == 0
    assert await conn.execute("ZSCORE", ks.pending, "ghost") is None
    assert await conn.execute("ZSCORE", ks.dead, "ghost") is None
    assert await conn.execute("EXISTS", ks.metrics_dead) == 0


async def test_lease_from_another_server_run_is_recovered_without_counting(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A row stamped with another run id is recovered (listed) and its stalled count stays."""
    job_id = await _stall(conn, queue, ks)
    await conn.execute("HSET", ks.job(job_id), "lease_epoch", "0" * 40)
    sweep = await stalled.check(conn, queue, max_stalled=1)
    assert sweep == echomq.Sweep(recovered=[job_id], dead=[])
    assert await field(conn, ks, job_id, "stalled") is None  # not counted: absent is 0
    assert await field(conn, ks, job_id, "state") == b"pending"


async def test_lease_without_epoch_is_recovered_without_counting(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A row with no lease_epoch (from before epochs were stamped) is not counted."""
    job_id = await _stall(conn, queue, ks)
    await conn.execute("HDEL", ks.job(job_id), "lease_epoch")
    sweep = await stalled.check(conn, queue, max_stalled=1)
    assert sweep == echomq.Sweep(recovered=[job_id], dead=[])
    assert await field(conn, ks, job_id, "stalled") is None  # not counted: absent is 0
    assert await conn.execute("ZSCORE", ks.pending, job_id) is not None


async def test_sweep_publishes_dead_and_recovered_events(
    conn: echomq.Connection, queue: str, ks: Keyspace, redis_url: str
) -> None:
    """The sweep announces each dead-lettered and each recovered job."""
    import trio

    from echomq._wire.dial import open_pubsub

    dead_id = await _stall(conn, queue, ks)
    async with open_pubsub(redis_url) as ps:
        await ps.subscribe(ks.events)  # returns once the server confirmed
        await stalled.check(conn, queue)
        live_id = await _stall(conn, queue, ks)
        await conn.execute("HDEL", ks.job(live_id), "lease_epoch")
        await stalled.check(conn, queue)
        with trio.fail_after(2):
            got = [json.loads((await ps.receive()).data) for _ in range(4)]
    assert {"event": "dead", "job": dead_id, "error": "stalled"} in got
    assert {"event": "recovered", "job": live_id} in got


def test_reap_and_the_sweep_take_their_arguments_in_one_order() -> None:
    """stalled_check and reap: the same KEYS (active, pending, wake) and ARGV (the base, the
    limit, the stall bound), in the calls and in the scripts' headers."""
    from echomq.jobs.lifecycle import reap_call

    sweep = stalled.check_call("q", limit=7, max_stalled=3)
    reap = reap_call("q", limit=7, max_recoveries=3)
    assert (sweep.keys, sweep.argv) == (reap.keys, reap.argv)
    assert sweep.argv == [Keyspace("q").base, 7, 3]

    keys = r"  KEYS  1 active .*\n        2 pending .*\n        3 wake .*\n"
    argv = r"  ARGV  1 queue base   2 limit \(1\.\.MAX_BATCH\)   3 (\w+)"
    bounds = []
    for script in (sweep.script, reap.script):
        assert re.search(keys, script.source), script.name
        found = re.search(argv, script.source)
        assert found, script.name
        bounds.append(found[1])
    assert bounds == ["max_stalled", "max_recoveries"]
