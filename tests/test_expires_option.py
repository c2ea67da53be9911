"""``expires=`` through the API (docs/runtime.md "Expiry"): per task, per apply, per flow
node and per repeatable, and ``echomq enqueue --expires``. A bad value is refused before
any I/O; a job not started by its deadline never runs and its ``result()`` raises
``JobExpired``."""

from __future__ import annotations

import datetime as dt
import os
import sys

import pytest
import trio

import echomq
from _waits import clock_past, until
from echomq import jobs, repeat
from echomq._model.options import EnqueueOptions, TaskOptions, expires_fields
from echomq._scripts.keyspace import Keyspace
from echomq.errors import InvalidArgument, JobExpired

UTC = dt.UTC


async def row(conn: echomq.Connection, queue: str, job_id: str, *names: str) -> list[bytes | None]:
    answer: list[bytes | None] = await conn.execute("HMGET", Keyspace(queue).job(job_id), *names)
    return answer


def test_expires_takes_a_timedelta_seconds_or_an_aware_datetime() -> None:
    """A duration is ms after the enqueue; an aware datetime an epoch ms; None nothing."""
    assert expires_fields(dt.timedelta(minutes=2)) == {"expires_ms": 120_000}
    assert expires_fields(1.5) == {"expires_ms": 1500}
    assert expires_fields(3) == {"expires_ms": 3000}
    at = dt.datetime(2030, 1, 2, 3, 4, 5, 6000, tzinfo=UTC)
    assert expires_fields(at) == {"expires_at_ms": round(at.timestamp() * 1000)}
    other_zone = at.astimezone(dt.timezone(dt.timedelta(hours=5)))
    assert expires_fields(other_zone) == expires_fields(at)
    assert expires_fields(None) == {}


@pytest.mark.parametrize(
    "bad",
    [
        -1,
        0,
        dt.timedelta(seconds=-5),
        dt.timedelta(0),
        float("nan"),
        float("inf"),
        True,
        "60",
        dt.datetime(2030, 1, 1),  # naive: which clock?
        dt.date(2030, 1, 1),
        2.0**41,  # past 2^40 ms
    ],
)
def test_a_bad_expires_is_refused_when_the_options_are_built(bad: object) -> None:
    """Negative, zero, a naive datetime, a wrong type: InvalidArgument, at the decorator and
    at the apply (before any I/O)."""
    with pytest.raises(InvalidArgument):
        EnqueueOptions(expires=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        TaskOptions(expires=bad)  # type: ignore[arg-type]


def test_a_repeatable_refuses_a_datetime_deadline(closed_port_url: str) -> None:
    """A repeatable's runs each expire after their own slot: a datetime has no meaning."""
    q = echomq.Queue("rep", url=closed_port_url)
    with pytest.raises(InvalidArgument, match="repeatable"):

        @q.task(name="app.tick", every=60, expires=dt.datetime(2030, 1, 1, tzinfo=UTC))
        async def tick() -> None: ...

    @q.task(name="app.ok", every=60, expires=30)
    async def ok() -> None: ...

    assert ok.options.expires == 30


async def test_a_bad_expires_at_apply_does_no_io(closed_port_url: str) -> None:
    """The queue's port is closed: a refusal that dialled would raise ConnectionLost."""
    q = echomq.Queue("closed", url=closed_port_url)

    @q.task
    async def send(x: int) -> None: ...

    async with q.open():
        for bad in (-1, dt.datetime(2030, 1, 1), "soon"):
            with pytest.raises(InvalidArgument):
                await send.apply((1,), expires=bad)


async def test_the_task_s_deadline_and_the_apply_s(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """The task's expires is each job's; an apply's replaces it; an aware datetime is an
    absolute deadline."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task(expires=dt.timedelta(seconds=30))
    async def send(x: int) -> None: ...

    at = dt.datetime.now(UTC) + dt.timedelta(hours=1)
    with trio.fail_after(5):
        async with q.open():
            own = await send.delay(1)
            short = await send.apply((2,), expires=2.5)
            absolute = await send.apply((3,), expires=at)
    created, deadline = (
        int(x or 0) for x in await row(conn, queue, own.id, "created_at", "expires_at")
    )
    assert deadline == created + 30_000
    created, deadline = (
        int(x or 0) for x in await row(conn, queue, short.id, "created_at", "expires_at")
    )
    assert deadline == created + 2_500
    [stored] = await row(conn, queue, absolute.id, "expires_at")
    assert stored == str(round(at.timestamp() * 1000)).encode()
    info = await jobs.get_job(conn, queue, absolute.id)
    assert info is not None and info.expires_at == round(at.timestamp() * 1000)


async def test_result_raises_job_expired(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """A job whose deadline passed before a claim: the claim drops it, and result()
    (waiting already, or called later) raises JobExpired; the job never ran."""
    q = echomq.Queue(queue, url=redis_url)
    ran: list[int] = []

    @q.task
    async def send(x: int) -> None:
        ran.append(x)

    past = dt.datetime.now(UTC) - dt.timedelta(seconds=1)
    with trio.fail_after(5):
        async with q.open():
            handle = await send.apply((1,), expires=past)
            caught: list[BaseException] = []
            async with trio.open_nursery() as nursery:

                async def wait() -> None:
                    try:
                        await handle.result(timeout=4)
                    except JobExpired as exc:
                        caught.append(exc)

                nursery.start_soon(wait)
                await trio.testing.wait_all_tasks_blocked(cushion=0.01)
                assert await jobs.claim(q.connection, queue, 10_000) == []
            with pytest.raises(JobExpired) as late:
                await handle.result(timeout=1)
    assert [type(e) for e in caught] == [JobExpired]
    assert late.value.job_id == handle.id and ran == []
    info = await jobs.get_job(conn, queue, handle.id)
    assert info is not None and info.state is echomq.JobState.EXPIRED


async def test_a_worker_never_runs_an_expired_job(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """A worker started after the deadline: the job ends expired, the one behind it runs."""
    q = echomq.Queue(queue, url=redis_url)
    ran: list[int] = []

    @q.task
    async def send(x: int) -> None:
        ran.append(x)

    with trio.fail_after(10):
        async with q.open():
            late = await send.apply((1,), expires=0.001)
            [deadline] = await row(conn, queue, late.id, "expires_at")
            await clock_past(conn, float(deadline or 0), Keyspace(queue).meta)
            live = await send.delay(2)
            async with trio.open_nursery() as nursery:
                worker = echomq.Worker(q, concurrency=2)
                await nursery.start(worker.serve)
                await live.result(timeout=5)
                with pytest.raises(JobExpired):
                    await late.result(timeout=5)
                worker.shutdown()
    assert ran == [2]


async def test_a_repeatable_s_runs_each_expire_after_their_slot(
    conn: echomq.Connection, queue: str
) -> None:
    """repeat.add(expires_ms=...) is kept on the record; each fired run's deadline is its
    own slot plus it."""
    added = await repeat.add(
        conn,
        queue,
        "tick",
        task="app.tick",
        payload=b"{}",
        schedule=repeat.Schedule.of(every=0.05),
        expires_ms=40,
    )
    record = await repeat.get(conn, queue, "tick")
    assert record.expires_ms == 40
    await clock_past(conn, added.next_ms, Keyspace(queue).meta)
    (run,) = (await repeat.tick(conn, queue)).fired
    [deadline] = await row(conn, queue, run, "expires_at")
    assert deadline == str(added.next_ms + 40).encode()
    again = await repeat.add(
        conn,
        queue,
        "tick",
        task="app.tick",
        payload=b"{}",
        schedule=repeat.Schedule.of(every=0.05),
    )
    assert not again.created
    assert (await repeat.get(conn, queue, "tick")).expires_ms is None
    with pytest.raises(InvalidArgument):
        await repeat.add(
            conn,
            queue,
            "tock",
            task="app.tick",
            payload=b"{}",
            schedule=repeat.Schedule.of(every=1),
            expires_ms=0,
        )


async def test_a_repeatable_task_registers_its_deadline(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """A worker registers @queue.task(every=..., expires=...) with the deadline in ms."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task(name="app.tick", every=3600, expires=dt.timedelta(minutes=5))
    async def tick() -> None: ...

    with trio.fail_after(10):
        async with q.open():
            async with trio.open_nursery() as nursery:
                worker = echomq.Worker(q)
                await nursery.start(worker.serve)

                async def registered() -> bool:
                    try:
                        return (await repeat.get(conn, queue, "app.tick")).expires_ms == 300_000
                    except echomq.errors.RepeatNotFound:
                        return False

                await until(registered)
                worker.shutdown()


async def test_the_cli_enqueue_takes_expires(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """`echomq enqueue --expires SECONDS` writes the deadline; a bad one is a usage error
    and writes nothing."""
    env = {**os.environ, "ECHOMQ_URL": redis_url}

    async def run(*args: str) -> trio.Process:
        with trio.fail_after(30):
            return await trio.run_process(
                [sys.executable, "-m", "echomq", *args],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                env=env,
            )

    p = await run("enqueue", "app.send", "[1]", "-q", queue, "--expires", "90", "--create")
    assert p.returncode == 0, p.stderr
    job_id = p.stdout.decode().strip()
    created, deadline = (
        int(x or 0) for x in await row(conn, queue, job_id, "created_at", "expires_at")
    )
    assert deadline == created + 90_000
    bad = await run("enqueue", "app.send", "[1]", "-q", queue, "--expires", "-3")
    assert bad.returncode != 0 and b"--expires" in bad.stderr
    assert await conn.execute("ZCARD", Keyspace(queue).pending) == 1


async def test_a_flow_node_s_deadline_and_its_parent(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """`task.s(...).set(expires=...)` in a chain: the step expires at its claim, and the
    next step (its parent, policy fail) becomes pending, seeing a failed child."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task
    async def first(x: int) -> int:
        return x

    @q.task
    async def then(x: int) -> int:
        return x

    past = dt.datetime.now(UTC) - dt.timedelta(seconds=1)
    with trio.fail_after(5):
        async with q.open():
            flow = await echomq.chain(first.s(1).set(expires=past), then.s()).apply()
            assert await jobs.claim(conn, queue, 10_000) == []  # the first step expires
            [parent] = await jobs.claim(conn, queue, 10_000)
    assert parent.id == flow.id
    row_ = await conn.execute("HMGET", Keyspace(queue).job(flow.id), "failed", "open")
    assert row_ == [b"1", b"0"]


async def test_the_dead_listing_names_the_expired_jobs(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """`admin.list_jobs(..., "dead")` and `echomq jobs --state dead` hold the expired
    jobs too, each marked expired."""
    from echomq import admin

    late = await jobs.enqueue(conn, queue, b"x", expires_ms=1)
    [deadline] = await row(conn, queue, late, "expires_at")
    await clock_past(conn, float(deadline or 0), Keyspace(queue).meta)
    assert await jobs.claim(conn, queue, 10_000) == []
    page = await admin.list_jobs(conn, queue, "dead")
    [listed] = page.rows
    assert listed.id == late and listed.expired and listed.last_error is None
    env = {**os.environ, "ECHOMQ_URL": redis_url}
    with trio.fail_after(30):
        p = await trio.run_process(
            [sys.executable, "-m", "echomq", "jobs", queue, "--state", "dead"],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env={**env, "COLUMNS": "100"},
        )
    assert p.returncode == 0, p.stderr
    assert b"expired: not started by its deadline" in p.stdout


def test_the_blocking_enqueue_takes_a_deadline(redis_url: str, queue: str) -> None:
    """echomq.sync's enqueue (the blocking twin of jobs.enqueue) writes the deadline."""
    import echomq.sync

    with echomq.sync.connect(redis_url) as mq:
        job_id = mq.enqueue(queue, b"x", expires_ms=45_000)
        info = mq.get_job(queue, job_id)
    assert info is not None and info.created_at is not None
    assert info.expires_at == info.created_at + 45_000
