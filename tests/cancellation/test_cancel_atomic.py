"""cancel.request is one atomic transition (docs/lua.md, "Decisions"): raced against claims,
every answer agrees with what the job became; an active job's request is stored on its row,
so a worker that missed the event still stops the job at its next lease checkpoint."""

from __future__ import annotations

import pytest
import trio

import echomq
from echomq import cancel, jobs
from echomq._scripts.keyspace import Keyspace
from echomq.errors import JobGone, JobLocked, NotCancellable
from verbs._support import snapshot
from worker._runtime import serving

LEASE = 60_000
ROUNDS = 300


async def test_cancel_raced_against_claims_answers_what_happened(
    redis_url: str, queue: str
) -> None:
    """300 claims racing 300 cancels: a removed job was never claimed; a signalled one is
    held by its claimer and carries the cancel flag."""
    ks = Keyspace(queue)
    outcomes: dict[str, int] = {"removed": 0, "signalled": 0}
    async with echomq.connect(redis_url) as a, echomq.connect(redis_url) as b:
        with trio.fail_after(30):
            for i in range(ROUNDS):
                job_id = f"race-{i}"
                await jobs.enqueue(a, queue, b"x", job_id=job_id)
                said: list[str] = []
                got: list[echomq.Claimed] = []

                async def cancel_it(job_id: str = job_id, said: list[str] = said) -> None:
                    said.append(await cancel.request(b, queue, job_id, "race"))

                async def claim_it(got: list[echomq.Claimed] = got) -> None:
                    got.extend(await jobs.claim(a, queue, LEASE))

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(cancel_it)
                    nursery.start_soon(claim_it)
                [answer] = said
                outcomes[answer] += 1
                row = await jobs.get_job(a, queue, job_id)
                if answer == "removed":
                    assert got == [], f"round {i}: removed a job a worker had claimed"
                    assert row is None
                else:
                    assert [c.id for c in got] == [job_id], f"round {i}: signalled, unclaimed"
                    assert row is not None and row.state == "active"
                    assert await a.execute("HGET", ks.job(job_id), "cancel_reason") == b"race"
                    assert await a.execute("ZSCORE", ks.active, job_id) is not None
                    await jobs.complete(a, queue, job_id, got[0].token, b"cancelled:race")
    assert sum(outcomes.values()) == ROUNDS


async def test_cancel_refusals_write_nothing(conn: echomq.Connection, queue: str) -> None:
    """Locked waiting job: JobLocked; completed / dead: NotCancellable; no row: JobGone.
    Each leaves the queue's keyspace exactly as it was."""
    ks = Keyspace(queue)
    await jobs.enqueue(conn, queue, b"x", job_id="done")
    await jobs.enqueue(conn, queue, b"x", job_id="dead")
    [done, dead] = await jobs.claim(conn, queue, LEASE, count=2)
    await jobs.complete(conn, queue, "done", done.token, b"r")
    await jobs.fail(conn, queue, "dead", dead.token, "boom", dead=True)
    await jobs.enqueue(conn, queue, b"x", job_id="locked")
    await jobs.enqueue(conn, queue, b"x", job_id="locked-field", delay_ms=60_000)
    await conn.execute("SET", ks.lock("locked"), "op")
    await conn.execute("HSET", ks.job("locked-field"), "lock", "op")
    before = await snapshot(conn, ks)
    for job_id, error in (
        ("locked", JobLocked),
        ("locked-field", JobLocked),
        ("done", NotCancellable),
        ("dead", NotCancellable),
        ("nope", JobGone),
    ):
        with pytest.raises(error):
            await cancel.request(conn, queue, job_id, "no")
    assert await snapshot(conn, ks) == before


async def test_cancel_removes_a_waiting_job_with_its_logs(
    conn: echomq.Connection, queue: str
) -> None:
    """pending and scheduled jobs are removed: row, logs and set entry; a `removed` event."""
    ks = Keyspace(queue)
    await jobs.enqueue(conn, queue, b"x", job_id="p")
    await jobs.enqueue(conn, queue, b"x", job_id="s", delay_ms=60_000)
    await jobs.add_log(conn, queue, "p", "a line")
    assert await cancel.request(conn, queue, "p") == "removed"
    assert await cancel.request(conn, queue, "s", "later") == "removed"
    assert await conn.execute("EXISTS", ks.job("p"), ks.logs("p"), ks.job("s")) == 0
    assert await conn.execute("ZCARD", ks.pending) == 0
    assert await conn.execute("ZCARD", ks.schedule) == 0


async def test_repeated_cancel_of_an_active_job_keeps_the_first_request(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """A second request answers signalled, writes nothing, and publishes the first reason."""
    ks = Keyspace(queue)
    await jobs.enqueue(conn, queue, b"x", job_id="a")
    [held] = await jobs.claim(conn, queue, LEASE)
    assert await cancel.request(conn, queue, "a", "first") == "signalled"
    before = await snapshot(conn, ks)
    events: list[dict[str, object]] = []
    q = echomq.Queue(queue, url=redis_url)
    async with q.open():
        event_feed = await q.event_feed()
        with event_feed.listen(job="a", events=("cancel",), buffer=4) as heard:
            assert await cancel.request(conn, queue, "a", "second") == "signalled"
            with trio.fail_after(5):
                event = await heard.receive()
            events.append(dict(event.fields))
    assert await snapshot(conn, ks) == before
    assert events[0].get("reason") == "first"
    assert await conn.execute("HGET", ks.job("a"), "cancel_reason") == b"first"
    await jobs.complete(conn, queue, "a", held.token, b"cancelled:first")


async def test_extend_locks_answers_cancel_for_a_flagged_job(
    conn: echomq.Connection, queue: str
) -> None:
    """A flagged held job is extended and answered `cancel` with its reason; others `ok`."""
    ks = Keyspace(queue)
    for job_id in ("plain", "with-reason", "no-reason"):
        await jobs.enqueue(conn, queue, b"x", job_id=job_id)
    held = await jobs.claim(conn, queue, 1_000, count=3)
    await cancel.request(conn, queue, "with-reason", "stop it")
    await cancel.request(conn, queue, "no-reason")
    deadline = float(await conn.execute("ZSCORE", ks.active, "with-reason"))
    answers = await jobs.extend_locks(
        conn, queue, [(c.id, c.token) for c in held] + [("ghost", 1)], LEASE
    )
    assert answers == {
        "plain": "ok",
        "with-reason": "cancel",
        "no-reason": "cancel",
        "ghost": "gone",
    }
    assert answers.cancel_reasons == {"with-reason": "stop it", "no-reason": None}
    assert float(await conn.execute("ZSCORE", ks.active, "with-reason")) > deadline


async def test_a_worker_that_missed_the_event_stops_the_job_at_its_lease_checkpoint(
    redis_url: str, queue: str
) -> None:
    """The event went out while no worker held the job; the flag stays on the row, and the
    worker that claims the job later cancels it at its first lease renewal."""
    q = echomq.Queue(queue, url=redis_url)
    started: list[str] = []

    @q.task(lease=0.3)
    async def long() -> None:
        started.append("run")
        await trio.sleep(30)

    with trio.fail_after(10):
        async with q.open():
            conn = q.connection
            handle = await long.delay()
            [held] = await jobs.claim(conn, queue, LEASE)  # a holder with no subscription
            assert await handle.cancel("nobody heard") == "signalled"
            await jobs.release(conn, queue, [(held.id, held.token)])  # handed back
            worker = echomq.Worker(q)
            async with serving(worker):
                with pytest.raises(echomq.JobCancelled) as caught:
                    await handle.result(timeout=8)
    assert started == ["run"]
    assert caught.value.reason == "nobody heard"
    assert worker.statistics().cancelled == 1
