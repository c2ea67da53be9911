"""The queue-scope verbs of the operator plane (docs/operations.md): pause, resume,
is_paused, drain, obliterate, stats."""

from __future__ import annotations

import pytest
import trio
from _operator_support import queue_keys, snapshot

import echomq
from _waits import blocked
from echomq import admin, jobs
from echomq._scripts.keyspace import Keyspace
from echomq.errors import ActiveJobs, InvalidArgument, InvalidKey, NotPaused

LEASE = 5000


async def fill(conn: echomq.Connection, queue: str, n: int, **kw: int) -> list[str]:
    """Enqueue n jobs in one call; answer their ids."""
    return await jobs.enqueue_many(
        conn,
        queue,
        [jobs.NewJob(payload=f"p{i}", **kw) for i in range(n)],  # type: ignore[arg-type]
    )


# -- pause / resume ---------------------------------------------------------------------------


async def test_pause_gates_claim_and_keeps_backlog(conn: echomq.Connection, queue: str) -> None:
    """A paused queue answers no claims; its pending set is untouched."""
    [job_id] = await fill(conn, queue, 1)
    await admin.pause(conn, queue)
    assert await admin.is_paused(conn, queue)
    assert await jobs.claim(conn, queue, LEASE) == []
    assert await conn.execute("ZCARD", Keyspace(queue).pending) == 1
    await admin.resume(conn, queue)
    assert not await admin.is_paused(conn, queue)
    assert [c.id for c in await jobs.claim(conn, queue, LEASE)] == [job_id]


async def test_pause_and_resume_are_idempotent(conn: echomq.Connection, queue: str) -> None:
    """Pausing twice and resuming twice each answer normally and leave one state."""
    await admin.ensure_schema(conn, queue)  # the queue exists first
    assert not await admin.is_paused(conn, queue)
    await admin.resume(conn, queue)
    assert not await admin.is_paused(conn, queue)
    await admin.pause(conn, queue)
    await admin.pause(conn, queue)
    assert await admin.is_paused(conn, queue)
    await admin.resume(conn, queue)
    await admin.resume(conn, queue)
    assert not await admin.is_paused(conn, queue)


async def test_resume_wakes_an_idle_consumer(
    conn: echomq.Connection, queue: str, redis_url: str
) -> None:
    """resume pushes a wake token: a consumer blocked on the wake list returns."""
    ks = Keyspace(queue)
    await fill(conn, queue, 1)
    await admin.pause(conn, queue)
    await conn.execute("DEL", ks.wake)
    woke = trio.Event()
    got: list[object] = []

    async def wait(blocking: echomq.Connection) -> None:
        got.append(await blocking.execute("BLPOP", ks.wake, 5))
        woke.set()

    name = f"blpop-{queue}"
    async with (
        echomq.connect(redis_url, client_name=name) as blocking,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(wait, blocking)
        await blocked(conn, name, ks.wake)  # BLPOP waits on the server
        with trio.fail_after(3):
            await admin.resume(conn, queue)
            await woke.wait()
    assert got and got[0] is not None


async def test_admin_verbs_gate_queue_name_before_io(closed_port_url: str) -> None:
    """A bad queue name raises InvalidKey before any I/O, for every admin verb."""
    async with echomq.connect(closed_port_url) as c:
        for verb in (admin.pause, admin.resume, admin.drain, admin.obliterate, admin.stats):
            with pytest.raises(InvalidKey):
                await verb(c, "no spaces")


# -- drain -------------------------------------------------------------------------------------


async def test_drain_deletes_pending_and_spares_active_and_schedule(
    conn: echomq.Connection, queue: str
) -> None:
    """drain deletes pending rows and logs; active and scheduled jobs stay by default."""
    ks = Keyspace(queue)
    running, *waiting = await fill(conn, queue, 4)
    [held] = await jobs.claim(conn, queue, LEASE)
    assert held.id == running
    [later] = await fill(conn, queue, 1, delay_ms=60_000)
    await jobs.add_log(conn, queue, waiting[0], "a line")
    await conn.execute("HSET", ks.base + "recurring", "nightly", "{}")  # a registration
    assert await admin.drain(conn, queue) == 3
    assert await conn.execute("EXISTS", ks.pending, ks.logs(waiting[0])) == 0
    assert all([await jobs.get_job(conn, queue, j) is None for j in waiting])
    assert await conn.execute("ZSCORE", ks.active, running) is not None
    assert await conn.execute("ZSCORE", ks.schedule, later) is not None
    assert await conn.execute("HGET", ks.base + "recurring", "nightly") == b"{}"
    await jobs.complete(conn, queue, running, held.token, b"ok")


async def test_drain_with_schedule_deletes_both(conn: echomq.Connection, queue: str) -> None:
    """include_schedule=True drains the schedule set too; an empty queue drains to 0."""
    ks = Keyspace(queue)
    await fill(conn, queue, 2)
    await fill(conn, queue, 3, delay_ms=60_000)
    assert await admin.drain(conn, queue, include_schedule=True) == 5
    assert await conn.execute("EXISTS", ks.pending, ks.schedule) == 0
    assert await admin.drain(conn, queue, include_schedule=True) == 0


async def test_drain_steps_are_bounded_by_the_budget(conn: echomq.Connection, queue: str) -> None:
    """Each drain_step deletes at most `budget` jobs, pending first, and says what is left;
    drain loops over steps and reports progress; active jobs stay."""
    ks = Keyspace(queue)
    await fill(conn, queue, 4)
    await fill(conn, queue, 3, delay_ms=60_000)
    [held] = await jobs.claim(conn, queue, LEASE)
    step = await admin.drain_step(conn, queue, include_schedule=True, budget=2)
    assert (step.deleted, step.remaining, step.done) == (2, 4, False)
    assert await conn.execute("ZCARD", ks.pending) == 1
    assert await conn.execute("ZCARD", ks.schedule) == 3
    step = await admin.drain_step(conn, queue, include_schedule=True, budget=2)
    assert (step.deleted, step.remaining) == (2, 2)  # the last pending job, then scheduled
    assert await conn.execute("ZCARD", ks.pending) == 0
    seen: list[tuple[int, int]] = []
    total = await admin.drain(
        conn, queue, include_schedule=True, budget=1, on_progress=lambda d, r: seen.append((d, r))
    )
    assert total == 2 and seen == [(1, 1), (2, 0)]
    assert await conn.execute("ZSCORE", ks.active, held.id) is not None
    assert await admin.drain_step(conn, queue) == admin.DrainStep(deleted=0, remaining=0)


async def test_drain_script_checks_its_budget_before_writing(
    conn: echomq.Connection, queue: str
) -> None:
    """The drain script refuses a budget over its cap itself (InvalidArgument), writing nothing."""
    from echomq._scripts.calls import evaluate

    await fill(conn, queue, 3)
    before = await snapshot(conn, queue)
    sc = admin.drain_call(queue, budget=1)
    over = type(sc)(sc.script, sc.keys, [*sc.argv[:2], admin.MAX_BUDGET + 1], sc.read)
    with pytest.raises(InvalidArgument):
        await evaluate(conn, over)
    assert await snapshot(conn, queue) == before


# -- obliterate --------------------------------------------------------------------------------


async def test_obliterate_refuses_unpaused_queue(conn: echomq.Connection, queue: str) -> None:
    """obliterate of a running queue raises NotPaused and deletes nothing."""
    await fill(conn, queue, 3)
    before = await snapshot(conn, queue)
    with pytest.raises(NotPaused):
        await admin.obliterate(conn, queue)
    assert await snapshot(conn, queue) == before


async def test_obliterate_refuses_active_jobs_unless_forced(
    conn: echomq.Connection, queue: str
) -> None:
    """With a job in flight obliterate raises ActiveJobs; force deletes it all."""
    await fill(conn, queue, 3)
    await jobs.claim(conn, queue, LEASE)
    await admin.pause(conn, queue)
    before = await snapshot(conn, queue)
    with pytest.raises(ActiveJobs):
        await admin.obliterate(conn, queue)
    assert await snapshot(conn, queue) == before
    assert await admin.obliterate(conn, queue, force=True) is True
    assert await queue_keys(conn, queue) == []


async def test_obliterate_in_budgets_leaves_no_key(conn: echomq.Connection, queue: str) -> None:
    """A budget smaller than the queue answers False, then True; no emq:{q}:* key remains."""
    ks = Keyspace(queue)
    ids = await fill(conn, queue, 5)
    await fill(conn, queue, 2, delay_ms=60_000)
    [c] = await jobs.claim(conn, queue, LEASE)
    await jobs.complete(conn, queue, c.id, c.token, b"r")
    [c] = await jobs.claim(conn, queue, LEASE)
    await jobs.fail(conn, queue, c.id, c.token, "x", dead=True)
    await jobs.add_log(conn, queue, ids[3], "log")
    await conn.execute("SET", ks.lock(ids[4]), "1")
    await conn.execute("SET", ks.sweep_guard, "1")
    await conn.execute("HSET", ks.job("orphan"), "state", "pending")  # a row in no set
    await admin.pause(conn, queue)
    assert len(await queue_keys(conn, queue)) > 10
    answers = [await admin.obliterate(conn, queue, budget=3)]
    with trio.fail_after(5):
        while not answers[-1]:
            answers.append(await admin.obliterate(conn, queue, budget=3))
    assert answers[0] is False and answers[-1] is True and len(answers) >= 3
    assert await queue_keys(conn, queue) == []


async def test_obliterate_all_reports_progress(conn: echomq.Connection, queue: str) -> None:
    """obliterate_all loops to the end and reports a growing deleted count."""
    await fill(conn, queue, 7)
    await admin.pause(conn, queue)
    seen: list[int] = []
    total = await admin.obliterate_all(conn, queue, budget=2, on_progress=seen.append)
    assert total >= 7 and seen == sorted(seen) and seen[-1] == total and len(seen) >= 4
    assert await queue_keys(conn, queue) == []


@pytest.mark.parametrize("budget", [0, -1, admin.MAX_BUDGET + 1, 2.5])
async def test_obliterate_and_drain_reject_bad_budget(closed_port_url: str, budget: object) -> None:
    """The budget is an int in 1..MAX_BUDGET (500), checked before any I/O."""
    async with echomq.connect(closed_port_url) as c:
        with pytest.raises(InvalidArgument):
            await admin.obliterate(c, "q", budget=budget)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument):
            await admin.drain(c, "q", budget=budget)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument):
            await admin.drain_step(c, "q", budget=budget)  # type: ignore[arg-type]


# -- stats -------------------------------------------------------------------------------------


async def test_stats_counts_every_state(conn: echomq.Connection, queue: str) -> None:
    """stats counts each state set, the gate, and completions by total and last minute."""
    await fill(conn, queue, 4)
    await fill(conn, queue, 1, delay_ms=60_000)
    [a, b] = await jobs.claim(conn, queue, LEASE, count=2)
    await jobs.complete(conn, queue, a.id, a.token, b"r")
    await jobs.fail(conn, queue, b.id, b.token, "x", dead=True)
    await jobs.claim(conn, queue, LEASE)
    await admin.pause(conn, queue)
    s = await admin.stats(conn, queue)
    assert (s.pending, s.scheduled, s.active, s.dead, s.completed) == (1, 1, 1, 1, 1)
    assert s.paused and s.jobs == 5
    assert (s.completed_total, s.failed_total, s.completed_last_minute) == (1, 1, 1)


async def test_obliterate_stops_when_resumed_midway(conn: echomq.Connection, queue: str) -> None:
    """A queue resumed between budgeted calls refuses the next call; the gate went last."""
    await fill(conn, queue, 4)
    await admin.pause(conn, queue)
    assert await admin.obliterate(conn, queue, budget=2) is False
    await admin.resume(conn, queue)
    with pytest.raises(NotPaused):
        await admin.obliterate_all(conn, queue, budget=2)
    assert await conn.execute("ZCARD", Keyspace(queue).pending) == 2


async def test_resume_of_a_running_queue_changes_nothing(
    conn: echomq.Connection, queue: str
) -> None:
    """Resuming a queue that is not paused writes nothing, not even a wake token;
    resuming a paused one pushes exactly one (docs/operations.md)."""
    ks = Keyspace(queue)
    await fill(conn, queue, 1)
    await conn.execute("DEL", ks.wake)
    before = await snapshot(conn, queue)
    await admin.resume(conn, queue)
    await admin.resume(conn, queue)
    assert await snapshot(conn, queue) == before
    await admin.pause(conn, queue)
    await admin.resume(conn, queue)
    assert await conn.execute("LLEN", ks.wake) == 1
