"""Cancelling a flow never lets a job of it start once ``cancel()`` returned (docs/flows.md
"Cancelling a flow"): its waiting jobs leave, queue by queue and page by page while each
queue's claims are held, before any running one is signalled. Real workers; each member
notes, when its handler starts, whether the cancel had returned by then."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import trio

import echomq
from echomq import flows, jobs
from echomq._scripts.calls import evaluate
from echomq._scripts.keyspace import Keyspace

from ._app import until

LIMIT = 60


class Marks:
    """Which members started, and whether the cancel had returned when each did."""

    def __init__(self) -> None:
        self.returned = False
        self.started: dict[str, bool] = {}  # job id -> started after cancel() returned
        self.gate = trio.Event()
        self.pace = 0.002  # each quick member's run, seconds

    def after(self) -> list[str]:
        return [i for i, late in self.started.items() if late]


def make_app(name: str, url: str, marks: Marks) -> tuple[echomq.Queue, dict[str, Any]]:
    q = echomq.Queue(name, url=url)

    @q.task(name="block")
    async def block(job: echomq.Job) -> int:
        marks.started[job.id] = marks.returned
        await marks.gate.wait()
        return 0

    @q.task(name="quick")
    async def quick(job: echomq.Job, x: int) -> int:
        marks.started[job.id] = marks.returned
        await trio.sleep(marks.pace)
        return x

    @q.task(name="total")
    async def total(job: echomq.Job, values: list[Any]) -> int:
        marks.started[job.id] = marks.returned
        return len(values)

    @q.task(name="canary")
    async def canary() -> str:
        return "ok"

    return q, {"block": block, "quick": quick, "total": total, "canary": canary}


@asynccontextmanager
async def workers(*pairs: tuple[echomq.Queue, int]) -> AsyncIterator[list[echomq.Worker]]:
    started: list[echomq.Worker] = []
    async with AsyncExitStack() as stack:
        nursery = await stack.enter_async_context(trio.open_nursery())
        for q, concurrency in pairs:
            await stack.enter_async_context(q.open())
            worker = echomq.Worker(q, concurrency=concurrency)
            await nursery.start(worker.serve)
            started.append(worker)
        try:
            yield started
        finally:
            for worker in started:
                worker.shutdown(grace=0)


async def waiting_jobs(conn: echomq.Connection, queue: str) -> int:
    ks = Keyspace(queue)
    return sum([int(await conn.execute("ZCARD", key)) for key in (ks.pending, ks.waiting)])


async def canary_runs(q: echomq.Queue, canary: Any) -> None:
    """A job enqueued after the cancel completes: anything of the flow still pending on
    this queue would have been claimed first (FIFO), so its run is the proof's end."""
    handle = await canary.delay()
    assert await handle.result(timeout=LIMIT) == "ok"


async def test_a_chord_of_twenty_on_one_slot(redis_url: str, queue: str) -> None:
    """One blocking member runs on a concurrency-1 worker; its 20 siblings and the
    callback wait. The cancel removes them and only then signals the blocker, in one
    atomic call: the freed slot finds nothing of the flow to claim."""
    marks = Marks()
    q, t = make_app(queue, redis_url, marks)
    async with workers((q, 1)) as [worker]:
        members = [t["block"].s(), *(t["quick"].s(i) for i in range(20))]
        handle = await echomq.chord(members, t["total"].s()).apply()
        with trio.fail_after(LIMIT):
            await until(lambda: len(marks.started) == 1)
            assert (
                await handle.cancel("stop") == 22
            )  # 20 members and the callback removed, 1 signalled
            marks.returned = True
            assert await waiting_jobs(q.connection, queue) == 0
            await until(lambda: worker.statistics().cancelled == 1)
            await canary_runs(q, t["canary"])
    assert len(marks.started) == 1 and marks.after() == []  # the blocker, and nothing else


async def test_a_chord_across_queues(redis_url: str, queue: str) -> None:
    """The members on queue B (one concurrency-1 worker), the callback on A: each queue's
    part is removed by its own call, B's claims held, before the blocker is signalled."""
    marks = Marks()
    qa, ta = make_app(queue, redis_url, marks)
    qb, tb = make_app(queue + "-b", redis_url, marks)
    async with workers((qa, 2), (qb, 1)) as [_, worker_b]:
        members = [tb["block"].s(), *(tb["quick"].s(i) for i in range(20))]
        handle = await echomq.chord(members, ta["total"].s()).apply()
        with trio.fail_after(LIMIT):
            await until(lambda: len(marks.started) == 1)
            assert await handle.cancel("stop") == 22
            marks.returned = True
            assert await waiting_jobs(qa.connection, queue) == 0
            assert await waiting_jobs(qb.connection, qb.name) == 0
            await until(lambda: worker_b.statistics().cancelled == 1)
            await canary_runs(qb, tb["canary"])
            await canary_runs(qa, ta["canary"])
            assert await qa.connection.execute("HGET", Keyspace(queue).meta, "hold") is None
    assert len(marks.started) == 1 and marks.after() == []


async def test_two_thousand_members_cancelled_while_three_workers_run_them(
    redis_url: str, queue: str
) -> None:
    """A chord of 2,000 members (9 pages) runs on 3 workers; cancelled mid-run. Nothing of
    it is claimed once cancel() returned (every claim of a member is older than the
    server's clock read right after it), and a member that starts late was claimed before
    the cancel (then signalled: it ends cancelled)."""
    marks = Marks()
    marks.pace = 0.05  # 2,000 of them on 12 slots: ~8 s, cancelled after the first 40
    apps = [make_app(queue, redis_url, marks) for _ in range(3)]
    q, t = apps[0]
    async with workers(*((a, 4) for a, _ in apps)) as running:
        members = [t["quick"].s(i) for i in range(2000)]
        handle = await echomq.chord(members, t["total"].s()).apply()
        conn = q.connection
        with trio.fail_after(LIMIT):
            await until(lambda: len(marks.started) >= 40)
            cancelled = await handle.cancel("stop")
            marks.returned = True
            server_now = await _server_ms(conn)
            assert await waiting_jobs(conn, queue) == 0
            ran = len(marks.started)
            assert cancelled > 2000 - ran  # the ones not yet run: removed or signalled
            await until(lambda: all(w.statistics().held == 0 for w in running))
            await canary_runs(q, t["canary"])
        claims = await _claimed_at(conn, queue)
    late = [i for i, at in claims.items() if at > server_now]
    assert late == [], f"{len(late)} members claimed after cancel() returned"
    for job_id in marks.after():  # started late: claimed before the cancel, then stopped
        assert claims.get(job_id, 0) <= server_now
    assert len(marks.started) < 2000


async def _server_ms(conn: echomq.Connection) -> int:
    sec, usec = await conn.execute("TIME")
    return int(sec) * 1000 + int(usec) // 1000


async def _claimed_at(conn: echomq.Connection, queue: str) -> dict[str, int]:
    """Every finished member's claim time (ms), from the completions stream (the canary's
    left out: it is claimed after the cancel by design)."""
    out: dict[str, int] = {}
    for _, raw in await conn.execute("XRANGE", Keyspace(queue).completions, "-", "+"):
        f = {raw[i].decode(): raw[i + 1] for i in range(0, len(raw), 2)}
        if "claimed_at" in f and f.get("task") != b"canary":
            out[f["id"].decode()] = int(f["claimed_at"])
    return out


async def test_a_claim_hold_stops_claims_until_released(
    conn: echomq.Connection, queue: str
) -> None:
    """The hold alone: while it stands, a claim answers no job and the ms until it ends;
    a release lets the next claim take the job; a hold whose canceller died lapses."""
    await jobs.enqueue(conn, queue, b"x", job_id="j")
    take = flows.flow_cancel_call(queue, [], hold="take", token="t1", hold_ms=60_000)
    await evaluate(conn, take)
    batch = await jobs.claim_batch(conn, queue, 60_000)
    assert batch.jobs == [] and batch.next_due_ms is not None and batch.next_due_ms > 50_000
    await evaluate(conn, flows.flow_cancel_call(queue, [], hold="release", token="t1"))
    [claimed] = await jobs.claim(conn, queue, 60_000)
    assert claimed.id == "j"
    await jobs.enqueue(conn, queue, b"x", job_id="k")
    short = flows.flow_cancel_call(queue, [], hold="take", token="t2", hold_ms=1)
    await evaluate(conn, short)
    with trio.fail_after(5):
        await until(lambda: _claims_one(conn, queue))


async def _claims_one(conn: echomq.Connection, queue: str) -> bool:
    return len(await jobs.claim(conn, queue, 60_000)) == 1
