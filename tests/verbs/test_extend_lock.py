"""extend_lock and extend_locks: the order of checks (row, token, membership; docs/lua.md)."""

from __future__ import annotations

import pytest

import echomq
from echomq import jobs
from echomq._scripts import validate as v
from echomq._scripts.keyspace import Keyspace
from echomq.errors import JobGone, NotActive, StaleToken
from echomq.jobs import ExtendResult

from ._support import claim_one, field, lapse, run_id, server_now_ms, snapshot


async def test_extend_rescores_to_server_now_plus_lease(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """An ok extend moves the active score to server now + lease_ms."""
    job_id = await jobs.enqueue(conn, queue, b"x")
    held = await claim_one(conn, queue, lease_ms=1_000)
    before = await server_now_ms(conn)
    await jobs.extend_lock(conn, queue, job_id, held.token, 60_000)
    after = await server_now_ms(conn)
    score = float(await conn.execute("ZSCORE", ks.active, job_id))
    assert before + 60_000 <= score <= after + 60_000


async def test_extend_missing_row_is_gone(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """No row answers JobGone and writes nothing."""
    before = await snapshot(conn, ks)
    with pytest.raises(JobGone):
        await jobs.extend_lock(conn, queue, "nobody", 1, 1_000)
    assert await snapshot(conn, ks) == before


async def test_extend_stale_token_is_refused(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A token that is not the row's attempts answers StaleToken; the lease is unchanged."""
    await jobs.enqueue(conn, queue, b"x")
    held = await claim_one(conn, queue)
    before = await snapshot(conn, ks)
    with pytest.raises(StaleToken):
        await jobs.extend_lock(conn, queue, held.id, held.token + 1, 60_000)
    assert await snapshot(conn, ks) == before


async def test_stale_token_on_id_that_left_active_answers_stale_not_not_active(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """The token check runs before membership: stale + out of active answers StaleToken."""
    job_id = await jobs.enqueue(conn, queue, b"x")
    first = await claim_one(conn, queue, lease_ms=20)
    await lapse(conn, ks, job_id)
    assert await jobs.reap(conn, queue) == [job_id]
    second = await claim_one(conn, queue)
    await jobs.complete(conn, queue, job_id, second.token, b"done")
    assert await conn.execute("ZSCORE", ks.active, job_id) is None
    before = await snapshot(conn, ks)
    with pytest.raises(StaleToken):
        await jobs.extend_lock(conn, queue, job_id, first.token, 1_000)
    assert await snapshot(conn, ks) == before


async def test_lapsed_but_uncollected_lease_still_extends(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A lease past its deadline that no pass collected is still a member: it extends."""
    job_id = await jobs.enqueue(conn, queue, b"x")
    held = await claim_one(conn, queue, lease_ms=20)
    await lapse(conn, ks, job_id)
    await jobs.extend_lock(conn, queue, job_id, held.token, 60_000)
    assert float(await conn.execute("ZSCORE", ks.active, job_id)) > await server_now_ms(conn)
    assert await jobs.reap(conn, queue) == []


async def test_reaped_lease_answers_not_active_and_is_not_revived(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """Once reaped, the holder's (still matching) token answers NotActive; nothing moves."""
    job_id = await jobs.enqueue(conn, queue, b"x")
    held = await claim_one(conn, queue, lease_ms=20)
    await lapse(conn, ks, job_id)
    assert await jobs.reap(conn, queue) == [job_id]
    before = await snapshot(conn, ks)
    with pytest.raises(NotActive):
        await jobs.extend_lock(conn, queue, job_id, held.token, 60_000)
    assert await snapshot(conn, ks) == before
    assert await field(conn, ks, job_id, "state") == b"pending"


async def test_extend_stamps_lease_epoch_with_server_run_id(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A row stamped by another server run is re-stamped with the current run_id."""
    job_id = await jobs.enqueue(conn, queue, b"x")
    held = await claim_one(conn, queue)
    await conn.execute("HSET", ks.job(job_id), "lease_epoch", "an-earlier-run")
    await jobs.extend_lock(conn, queue, job_id, held.token, 5_000)
    assert await field(conn, ks, job_id, "lease_epoch") == (await run_id(conn, ks)).encode()


async def test_extend_locks_answers_id_by_id(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """One batch call answers ok / gone / stale / not_active per id, and only ok ids move."""
    ids = [await jobs.enqueue(conn, queue, b"x") for _ in range(3)]
    claimed = {c.id: c for c in await jobs.claim(conn, queue, 20, count=3)}
    ok_id, stale_id, reaped_id = ids
    await lapse(conn, ks, *ids)
    # keep ok_id and stale_id alive, let reaped_id be collected
    await jobs.extend_locks(
        conn, queue, [(ok_id, claimed[ok_id].token), (stale_id, claimed[stale_id].token)], 60_000
    )
    assert await jobs.reap(conn, queue) == [reaped_id]
    for job_id in (ok_id, stale_id):
        await conn.execute("HSET", ks.job(job_id), "lease_epoch", "an-earlier-run")
    stale_score = await conn.execute("ZSCORE", ks.active, stale_id)
    started = await server_now_ms(conn)

    result = await jobs.extend_locks(
        conn,
        queue,
        [
            (ok_id, claimed[ok_id].token),
            ("never-enqueued", 1),
            (stale_id, claimed[stale_id].token + 7),
            (reaped_id, claimed[reaped_id].token),
        ],
        90_000,
    )

    assert result == {
        ok_id: ExtendResult.OK,
        "never-enqueued": ExtendResult.GONE,
        stale_id: ExtendResult.STALE,
        reaped_id: ExtendResult.NOT_ACTIVE,
    }
    assert result[ok_id] == "ok"  # a str enum
    assert float(await conn.execute("ZSCORE", ks.active, ok_id)) >= started + 90_000
    assert await conn.execute("ZSCORE", ks.active, stale_id) == stale_score
    assert await conn.execute("ZSCORE", ks.active, reaped_id) is None
    assert await conn.execute("EXISTS", ks.job("never-enqueued")) == 0
    current = (await run_id(conn, ks)).encode()
    assert await field(conn, ks, ok_id, "lease_epoch") == current
    assert await field(conn, ks, stale_id, "lease_epoch") == b"an-earlier-run"


async def test_extend_locks_many_ids_in_one_call(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A batch at the cap re-scores every id."""
    ids = await jobs.enqueue_many(
        conn, queue, [jobs.NewJob(payload=b"x") for _ in range(v.MAX_HELD)]
    )
    claimed = await jobs.claim(conn, queue, 1_000, count=v.MAX_HELD)
    started = await server_now_ms(conn)
    result = await jobs.extend_locks(conn, queue, [(c.id, c.token) for c in claimed], 50_000)
    assert set(result) == set(ids)
    assert set(result.values()) == {ExtendResult.OK}
    lowest = await conn.execute("ZRANGE", ks.active, 0, 0, "WITHSCORES")
    assert float(lowest[1]) >= started + 50_000


async def test_extend_locks_empty_batch_answers_empty(conn: echomq.Connection, queue: str) -> None:
    """An empty batch answers an empty dict."""
    assert await jobs.extend_locks(conn, queue, [], 1_000) == {}
