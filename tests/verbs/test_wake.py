"""The idle wait: BLPOP on the wake lists with the claim pipelined behind it."""

from __future__ import annotations

import trio

import echomq
from _waits import blocked, is_blocked
from echomq import jobs
from echomq._scripts.keyspace import Keyspace
from echomq.jobs.wake import nudge, wait_then_claim


async def test_a_token_unblocks_and_the_claim_takes_the_job(
    conn: echomq.Connection, redis_url: str, queue: str
) -> None:
    """Enqueue while a consumer waits: the pipelined claim runs at once and holds the job."""
    name = f"wake-{queue}"
    async with echomq.connect(redis_url, client_name=name) as wake_conn:
        got: list[jobs.ClaimBatch] = []

        async def waiter() -> None:
            got.append(await wait_then_claim(wake_conn, conn, queue, "c1", 5.0, 10_000, 10))

        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(waiter)
                await blocked(conn, name, Keyspace(queue).wake)
                assert await conn.execute("ZCARD", Keyspace(queue).active) == 0
                job_id = await jobs.enqueue(conn, queue, b"x")
    [batch] = got
    assert [c.id for c in batch.jobs] == [job_id]
    info = await jobs.get_job(conn, queue, job_id)
    assert info is not None and info.state is echomq.JobState.ACTIVE


async def test_the_timeout_still_claims_and_reports_the_schedule(
    conn: echomq.Connection, redis_url: str, queue: str
) -> None:
    """With no token the BLPOP times out and the claim runs anyway (promoting due jobs)."""
    await jobs.enqueue(conn, queue, b"soon", delay_ms=20)
    await jobs.enqueue(conn, queue, b"later", delay_ms=60_000)
    async with echomq.connect(redis_url) as wake_conn:
        with trio.fail_after(5):
            batch = await wait_then_claim(wake_conn, conn, queue, "c1", 0.1, 10_000, 5)
    assert [c.payload for c in batch.jobs] == [b"soon"]
    assert batch.next_due_ms is not None and batch.next_due_ms > 50_000


async def test_nudge_wakes_one_consumer_only(
    conn: echomq.Connection, redis_url: str, queue: str
) -> None:
    """A nudge to consumer a ends a's wait; b keeps waiting until its own nudge."""
    done: list[str] = []
    a_done = trio.Event()
    names = {c: f"wake-{c}-{queue}" for c in "ab"}
    wake = Keyspace(queue).wake
    async with (
        echomq.connect(redis_url, client_name=names["a"]) as wake_a,
        echomq.connect(redis_url, client_name=names["b"]) as wake_b,
    ):

        async def wait(name: str, wake_conn: echomq.Connection) -> None:
            batch = await wait_then_claim(wake_conn, conn, queue, name, 5.0, 10_000, 1)
            assert batch.jobs == []
            done.append(name)
            if name == "a":
                a_done.set()

        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait, "a", wake_a)
                nursery.start_soon(wait, "b", wake_b)
                await blocked(conn, names["a"], wake)
                await blocked(conn, names["b"], wake)
                await nudge(conn, queue, "a")
                await a_done.wait()
                assert await is_blocked(conn, names["b"], wake)  # b still waits on the server
                assert done == ["a"]
                await nudge(conn, queue, "b")
    assert done == ["a", "b"]
    assert await conn.execute("EXISTS", Keyspace(queue).wake_direct("a")) == 0


async def test_unknown_script_is_loaded_and_claimed(
    conn: echomq.Connection, redis_url: str, queue: str
) -> None:
    """After SCRIPT FLUSH the pipelined claim answers NOSCRIPT; it is run again, loaded."""
    job_id = await jobs.enqueue(conn, queue, b"x")
    await conn.execute("SCRIPT", "FLUSH")
    async with echomq.connect(redis_url) as wake_conn:
        with trio.fail_after(5):
            batch = await wait_then_claim(wake_conn, conn, queue, "c1", 0.05, 10_000, 1)
    assert [c.id for c in batch.jobs] == [job_id]
