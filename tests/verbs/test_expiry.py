"""Expiry (docs/runtime.md "Expiry"): a job with a deadline not started by then is never
run. The claim drops it into the terminal state ``expired``: its completions entry,
metrics:expired, the dead index with keep_dead, an event, its flow parent told of a failed
child; at most MAX_EXPIRE a call; a queue with no deadline pays nothing for it."""

from __future__ import annotations

import echomq
from _waits import clock_past, due
from echomq import admin, cancel, flows, jobs
from echomq._scripts.keyspace import Keyspace
from echomq.cli.explain_text import facts, summary

from ._lanes import check_lanes, ring_of
from ._support import server_now_ms, snapshot

MAX_EXPIRE = 100  # claim.lua's bound


async def past_deadline(conn: echomq.Connection, ks: Keyspace, *job_ids: str) -> None:
    """Wait (bounded) until each job's deadline is behind the server clock."""
    for job_id in job_ids:
        deadline = await conn.execute("HGET", ks.job(job_id), "expires_at")
        assert deadline is not None, job_id
        await clock_past(conn, float(deadline), ks.meta)


async def state(conn: echomq.Connection, ks: Keyspace, job_id: str) -> bytes | None:
    answer: bytes | None = await conn.execute("HGET", ks.job(job_id), "state")
    return answer


async def entries(conn: echomq.Connection, ks: Keyspace) -> list[dict[bytes, bytes]]:
    raw = await conn.execute("XRANGE", ks.completions, "-", "+")
    return [dict(zip(f[::2], f[1::2], strict=True)) for _, f in raw]


async def test_a_waiting_job_past_its_deadline_expires_at_the_claim(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """The claim takes the job behind it; the expired one ends in `expired`: its row
    (finished_at, a keep_dead TTL), the dead index, the completions entry, the counter."""
    before = await server_now_ms(conn)
    late = await jobs.enqueue(conn, queue, b"late", expires_ms=1)
    other = await jobs.enqueue(conn, queue, b"other")
    deadline = int(await conn.execute("HGET", ks.job(late), "expires_at"))
    created = int(await conn.execute("HGET", ks.job(late), "created_at"))
    assert deadline == created + 1 and created >= before
    await past_deadline(conn, ks, late)
    claimed = await jobs.claim(conn, queue, 10_000, count=5)
    assert [c.id for c in claimed] == [other]
    info = await jobs.get_job(conn, queue, late)
    assert info is not None and info.state == "expired" and info.token == 0
    assert info.finished_at is not None and info.finished_at > deadline
    assert info.expires_at == deadline
    assert await conn.execute("ZSCORE", ks.pending, late) is None
    assert await conn.execute("ZSCORE", ks.active, late) is None
    score = await conn.execute("ZSCORE", ks.dead, late)
    keep_dead = 7 * 24 * 3600 * 1000  # the queue's default
    assert int(float(score)) == info.finished_at + keep_dead
    assert 0 < await conn.execute("PTTL", ks.job(late)) <= keep_dead
    [entry] = await entries(conn, ks)
    assert entry[b"id"] == late.encode() and entry[b"state"] == b"expired"
    assert entry[b"error"] == b"expired" and entry[b"token"] == b"0"
    assert await conn.execute("HGET", ks.base + "metrics:expired", "count") == b"1"
    stats = await admin.stats(conn, queue)
    assert stats.expired_total == 1 and stats.dead == 1 and stats.dead_total == 0


async def test_a_job_with_a_deadline_ahead_runs_normally(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A deadline not reached yet changes nothing: the job is claimed and completes, even
    once its deadline passes while it runs (it started in time)."""
    job_id = await jobs.enqueue(conn, queue, b"x", expires_ms=5_000)
    [held] = await jobs.claim(conn, queue, 60_000)
    assert held.id == job_id and held.token == 1
    await conn.execute("HSET", ks.job(job_id), "expires_at", 1)  # its deadline passes
    await jobs.complete(conn, queue, job_id, held.token, b"r")
    assert await state(conn, ks, job_id) == b"completed"
    assert await conn.execute("HGET", ks.base + "metrics:expired", "count") is None


async def test_a_retry_claimed_after_the_deadline_expires(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """The deadline holds for every start: a retry due after it expires, not runs."""
    job_id = await jobs.enqueue(conn, queue, b"x", expires_ms=60_000, max_attempts=3)
    [held] = await jobs.claim(conn, queue, 60_000)
    assert await jobs.fail(conn, queue, job_id, held.token, "boom") == "retrying"
    await conn.execute("HSET", ks.job(job_id), "expires_at", 1)
    assert await jobs.claim(conn, queue, 60_000) == []
    info = await jobs.get_job(conn, queue, job_id)
    assert info is not None and info.state == "expired" and info.failures == 1


async def test_a_delayed_job_past_its_deadline_expires_at_its_promotion(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """Due after its deadline: the claim does not promote it, it expires; the claim
    answers no job and 0 ms (claim again now)."""
    job_id = await jobs.enqueue(conn, queue, b"x", delay_ms=5, expires_ms=1)
    await due(conn, queue, job_id)
    await past_deadline(conn, ks, job_id)
    batch = await jobs.claim_batch(conn, queue, 10_000)
    assert batch.jobs == [] and batch.next_due_ms == 0
    assert await state(conn, ks, job_id) == b"expired"
    assert await conn.execute("ZCARD", ks.schedule) == 0
    assert await conn.execute("ZCARD", ks.pending) == 0
    assert await conn.execute("ZSCORE", ks.dead, job_id) is not None


async def test_a_grouped_job_expires_and_its_group_takes_its_turn_again(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A group of limit 1 whose first job expired: its slot is not spent, the group is
    back in the ring, and the next claim starts its next job."""
    [late, nxt] = await jobs.enqueue_many(
        conn,
        queue,
        [
            jobs.NewJob(payload=b"late", group="g", group_concurrency=1, expires_ms=1),
            jobs.NewJob(payload=b"next", group="g"),
        ],
    )
    await past_deadline(conn, ks, late)
    batch = await jobs.claim_batch(conn, queue, 10_000)
    assert batch.jobs == [] and batch.next_due_ms == 0
    assert await state(conn, ks, late) == b"expired"
    assert await conn.execute("HGET", ks.gstate, "g") is None  # no slot held
    assert await ring_of(conn, ks) == ["g"]
    await check_lanes(conn, queue)
    [held] = await jobs.claim(conn, queue, 10_000)
    assert held.id == nxt
    await check_lanes(conn, queue)


async def test_a_flow_child_expires_and_its_parent_sees_a_failed_child(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """An expired child is a failed child to its parent (policy fail: the parent becomes
    pending, its results name the child dead with the error `expired`)."""
    child = flows.FlowJob(job=jobs.NewJob(payload=b"c", job_id="c1", expires_ms=1), queue=queue)
    sibling = flows.FlowJob(job=jobs.NewJob(payload=b"c", job_id="c2"), queue=queue)
    parent = flows.FlowJob(
        job=jobs.NewJob(payload=b"p", job_id="p"), queue=queue, children=(child, sibling)
    )
    await flows.add_flow(conn, [parent])
    assert await conn.execute("HGET", ks.meta, "expiring") == b"1"
    assert await conn.execute("HGET", ks.job("c2"), "expires_at") is None
    await past_deadline(conn, ks, "c1")
    claimed = await jobs.claim(conn, queue, 10_000, count=2)
    assert [c.id for c in claimed] == ["c2"]
    assert await state(conn, ks, "c1") == b"expired"
    assert await state(conn, ks, "p") == b"pending"
    row = await conn.execute("HMGET", ks.job("p"), "open", "failed")
    assert row == [b"1", b"1"]
    assert await conn.execute("HGET", ks.child_results("p"), "c1") == b"dexpired"


async def test_only_a_queue_with_deadlines_reads_them(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """The meta flag `expiring` is set by the first enqueue with a deadline; without it the
    claim reads no `expires_at` (a row carrying one is claimed as any other)."""
    first = await jobs.enqueue(conn, queue, b"x")
    assert await conn.execute("HGET", ks.meta, "expiring") is None
    await conn.execute("HSET", ks.job(first), "expires_at", 1)
    [held] = await jobs.claim(conn, queue, 10_000)
    assert held.id == first
    late = await jobs.enqueue(conn, queue, b"x", expires_ms=1)
    assert await conn.execute("HGET", ks.meta, "expiring") == b"1"
    await past_deadline(conn, ks, late)
    assert await jobs.claim(conn, queue, 10_000) == []
    assert await state(conn, ks, late) == b"expired"


async def test_a_claim_drops_at_most_max_expire(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """150 expired jobs ahead of a live one: the first claim drops 100 and takes nothing
    (its picks bounded by what the bound leaves), the second drops 50 and takes the live
    one."""
    batch = [jobs.NewJob(payload=b"x", expires_ms=1) for _ in range(150)]
    late = await jobs.enqueue_many(conn, queue, batch)
    live = await jobs.enqueue(conn, queue, b"live")
    await past_deadline(conn, ks, late[-1])
    first = await jobs.claim_batch(conn, queue, 10_000, count=250)
    assert first.jobs == [] and first.next_due_ms == 0
    assert await conn.execute("HGET", ks.base + "metrics:expired", "count") == b"100"
    assert await conn.execute("ZCARD", ks.pending) == 51
    second = await jobs.claim(conn, queue, 10_000, count=250)
    assert [c.id for c in second] == [live]
    assert await conn.execute("HGET", ks.base + "metrics:expired", "count") == b"150"
    assert await conn.execute("ZCARD", ks.dead) == 150
    assert len(await entries(conn, ks)) == 150


async def test_explain_says_when_a_job_expires_and_that_it_did(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """explain names the deadline ahead, and for an expired job that it never ran."""
    job_id = await jobs.enqueue(conn, queue, b"x", expires_ms=60_000)
    e = await jobs.explain(conn, queue, job_id)
    assert e.job.expires_at is not None and e.consistent
    [label] = [value for name, value in facts(e) if name == "expires"]
    assert "not started by then, it expires" in label
    await conn.execute("HSET", ks.job(job_id), "expires_at", 1)
    assert await jobs.claim(conn, queue, 10_000) == []
    e = await jobs.explain(conn, queue, job_id)
    assert e.state == "expired" and e.sets == ("dead",) and e.consistent
    assert summary(e).startswith("expired") and "never ran" in summary(e)
    assert ("expires", "1970-01-01 00:00:00.001Z (passed before it started)") in facts(e)


async def test_a_refused_enqueue_with_a_deadline_writes_nothing(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A bad deadline is refused before any I/O: the queue is untouched."""
    await jobs.enqueue(conn, queue, b"x")
    before = await snapshot(conn, ks)
    for bad in (0, -5, 1.5, True, "10"):
        try:
            await jobs.enqueue(conn, queue, b"x", expires_ms=bad)  # type: ignore[arg-type]
        except echomq.InvalidArgument:
            pass
        else:
            raise AssertionError(f"expires_ms={bad!r} was taken")
    assert await snapshot(conn, ks) == before


async def test_an_expired_job_fires_its_error_callback(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """Its error callback (link_error) is enqueued by the claim, with the error `expired`,
    as where a job dies."""
    from echomq._model.errback import encode_spec

    late = await jobs.enqueue(conn, queue, b"x", expires_ms=1)
    spec = encode_spec(queue, jobs.NewJob(payload=b"cb", job_id=f"eb-{late}"))
    await conn.execute("HSET", ks.job(late), "errback", spec)
    await past_deadline(conn, ks, late)
    assert await jobs.claim(conn, queue, 10_000) == []  # the claim that drops it
    [callback] = await jobs.claim(conn, queue, 10_000)
    assert callback.id == f"eb-{late}"
    assert b'"error":"expired"' in callback.payload and late.encode() in callback.payload
    assert await state(conn, ks, late) == b"expired"


async def test_a_cancel_due_on_an_expired_job_fences_nothing(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A job with a cancel grace handed back to pending that expires before the fence:
    fence_cancels leaves it expired (a finished job only leaves `cancels`)."""
    job_id = await jobs.enqueue(conn, queue, b"x", expires_ms=60_000)
    [held] = await jobs.claim(conn, queue, 60_000)
    await cancel.request(conn, queue, job_id, grace=0.001)
    await jobs.release(conn, queue, [(job_id, held.token)])
    await conn.execute("HSET", ks.job(job_id), "expires_at", 1)
    assert await jobs.claim(conn, queue, 10_000) == []
    deadline = await conn.execute("ZSCORE", ks.cancels, job_id)
    await clock_past(conn, float(deadline), ks.meta)
    assert await cancel.fence_due(conn, queue) == []
    assert await state(conn, ks, job_id) == b"expired"
    assert await conn.execute("ZSCORE", ks.cancels, job_id) is None


async def test_a_claim_that_drops_a_promotion_still_leases_its_picks(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A due job expiring at its promotion and a live pick in the same call: the pick is
    leased as any claim leases (its token, its lease epoch, its place in active)."""
    late = await jobs.enqueue(conn, queue, b"late", delay_ms=5, expires_ms=1)
    live = await jobs.enqueue(conn, queue, b"live")
    await due(conn, queue, late)
    await past_deadline(conn, ks, late)
    [held] = await jobs.claim(conn, queue, 10_000, count=2)
    assert held.id == live and held.token == 1
    assert await conn.execute("HGET", ks.job(live), "lease_epoch") is not None
    assert await conn.execute("ZSCORE", ks.active, live) is not None
    assert await state(conn, ks, late) == b"expired"


async def test_a_debounced_holder_takes_the_new_deadline(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """Mode debounce: the waiting holder takes the new call's deadline with its payload."""
    first = jobs.NewJob(
        payload=b"a", dedup="k", dedup_ms=60_000, dedup_mode="debounce", expires_ms=1_000
    )
    [holder] = await jobs.enqueue_many(conn, queue, [first])
    before = int(await conn.execute("HGET", ks.job(holder), "expires_at"))
    again = jobs.NewJob(
        payload=b"b", dedup="k", dedup_ms=60_000, dedup_mode="debounce", expires_ms=50_000
    )
    assert await jobs.enqueue_many(conn, queue, [again]) == [holder]
    after = int(await conn.execute("HGET", ks.job(holder), "expires_at"))
    assert after >= before + 49_000
    assert await conn.execute("HGET", ks.job(holder), "payload") == b"b"
