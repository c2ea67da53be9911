"""Graceful shutdown: SIGTERM to a worker process; in-process shutdown(); immediate stop."""

from __future__ import annotations

import signal

import trio

import echomq
from echomq import jobs
from echomq._scripts.keyspace import Keyspace
from echomq.testing import wait_running

from ._runtime import serving, until, wait_state, worker_process


async def test_sigterm_lets_in_flight_jobs_finish_within_grace(redis_url: str, queue: str) -> None:
    """SIGTERM: the worker stops claiming, its running jobs finish, and it exits 0."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task(name="sleepy")
    async def sleepy(seconds: float) -> str:
        return "not this process"

    with trio.fail_after(20):
        async with q.open():
            handles = [await sleepy.delay(0.5) for _ in range(2)]
            async with worker_process(redis_url, queue, grace=5) as proc:
                for handle in handles:
                    await wait_running(handle)
                proc.send_signal(signal.SIGTERM)
                await proc.wait_for_log("stopped claiming")
                late = await sleepy.delay(0.0)  # enqueued once it stopped claiming: not run
                assert await proc.wait() == 0
            for handle in handles:
                assert await handle.result(timeout=1) == "slept"
            info = await late.info()
    assert info is not None and info.state == "pending" and info.token == 0
    assert "shutting down" in proc.output


async def test_sigterm_past_grace_hands_jobs_back_at_once(redis_url: str, queue: str) -> None:
    """Past grace the jobs are cancelled and back in pending at once; another worker runs them."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task(name="sleepy")
    async def quick(seconds: float) -> str:
        return "finished elsewhere"

    with trio.fail_after(20):
        async with q.open():
            handles = [await quick.delay(30) for _ in range(2)]
            # a 30 s lease: only the release (not a lapse) can bring them back this soon
            async with worker_process(redis_url, queue, grace=0.2, lease=30) as proc:
                for handle in handles:
                    await wait_running(handle)
                assert await proc.stop() == 0
            for handle in handles:
                info = await handle.info()
                assert info is not None and info.state == "pending"
                assert info.failures == 0 and info.stalled == 0 and info.token == 1
            async with serving(echomq.Worker(q, recovery_interval=60)):
                for handle in handles:
                    assert await handle.result(timeout=5) == "finished elsewhere"
    assert "handed 2 job(s) back to pending" in proc.output


async def test_shutdown_in_process_releases_jobs_still_running(redis_url: str, queue: str) -> None:
    """shutdown(grace=0) cancels running jobs and releases them with one fenced call."""
    q = echomq.Queue(queue, url=redis_url)
    started = 0

    @q.task
    async def forever() -> None:
        nonlocal started
        started += 1
        await trio.sleep_forever()

    with trio.fail_after(10):
        async with q.open():
            handles = [await forever.delay() for _ in range(3)]
            worker = echomq.Worker(q, grace=0)
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.serve)
                for handle in handles:
                    await wait_state(q.connection, queue, handle.id, "active")
                worker.shutdown()
            states = [await jobs.get_job(q.connection, queue, h.id) for h in handles]
    assert started == 3
    assert [s.state if s else None for s in states] == ["pending"] * 3
    assert worker.statistics().released == 3


async def test_cancelling_serve_from_outside_also_releases(redis_url: str, queue: str) -> None:
    """A worker cancelled by its caller's scope hands its jobs back too (its connections
    outlive the cancellation until then, so no claim reply is lost on the way out)."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task
    async def forever() -> None:
        await trio.sleep_forever()

    with trio.fail_after(10):
        async with q.open():
            handle = await forever.delay()
            worker = echomq.Worker(q)
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.serve)
                await wait_state(q.connection, queue, handle.id, "active")
                nursery.cancel_scope.cancel()
            info = await handle.info()
    assert info is not None and info.state == "pending"


async def test_stopping_an_idle_worker_leaves_new_work_pending(redis_url: str, queue: str) -> None:
    """An idle worker stops without taking work: a job enqueued afterwards stays pending."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task(name="noop")
    async def noop() -> None:
        return None

    worker = echomq.Worker(q, concurrency=4)
    with trio.fail_after(10):
        async with q.open(), trio.open_nursery() as nursery:
            await nursery.start(worker.serve)
            await until(lambda: worker.statistics().idle_waits > 0)  # in the pipelined wait
            worker.shutdown()
        async with echomq.connect(redis_url) as conn:
            job_id = await jobs.enqueue(conn, queue, b'{"task":"noop","args":[],"kwargs":{}}')
            info = await jobs.get_job(conn, queue, job_id)
            # a BLPOP (and its claim) left on the server would have taken the token at once
            assert await conn.execute("LLEN", Keyspace(queue).wake) == 1
    assert info is not None and info.state is echomq.JobState.PENDING


async def test_sigterm_with_every_slot_busy_starts_the_grace_at_once(
    redis_url: str, queue: str
) -> None:
    """Every slot busy: SIGTERM starts the grace at once (it used to wait ~10 s for the
    claim loop, blocked on a free slot, to notice), then hands the jobs back."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task(name="sleepy")
    async def sleepy(seconds: float) -> str:
        return "not this process"

    with trio.fail_after(30):
        async with q.open():
            handles = [await sleepy.delay(30) for _ in range(2)]
            async with worker_process(redis_url, queue, concurrency=2, grace=0.3) as proc:
                for handle in handles:
                    await wait_running(handle)
                with trio.fail_after(6):  # grace 0.3 s; before the fix: ~10.3 s
                    assert await proc.stop() == 0
            for handle in handles:
                info = await handle.info()
                assert info is not None and info.state == "pending" and info.failures == 0
    assert "handed 2 job(s) back to pending" in proc.output


async def test_second_sigterm_with_every_slot_busy_skips_the_grace(
    redis_url: str, queue: str
) -> None:
    """A second SIGTERM (or SIGINT) cuts a long grace short: cancel and release at once."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task(name="sleepy")
    async def sleepy(seconds: float) -> str:
        return "not this process"

    with trio.fail_after(30):
        async with q.open():
            handles = [await sleepy.delay(30) for _ in range(2)]
            async with worker_process(redis_url, queue, concurrency=2, grace=60) as proc:
                for handle in handles:
                    await wait_running(handle)
                proc.send_signal(signal.SIGTERM)
                # the grace starts at once (before the fix: ~10 s later)
                with trio.fail_after(5):
                    await proc.wait_for_log("waiting up to 60.0 s for 2 job(s)")
                proc.send_signal(signal.SIGINT)
                with trio.fail_after(5):
                    assert await proc.wait() == 0
            for handle in handles:
                info = await handle.info()
                assert info is not None and info.state == "pending" and info.failures == 0
    text = proc.output
    assert "again: stopping without grace" in text
    assert "handed 2 job(s) back to pending" in text


async def test_cancelling_serve_right_after_a_woken_claim_loses_no_job(
    redis_url: str, queue: str
) -> None:
    """Jobs taken by the idle wait's pipelined claim (on the worker's own wake connection)
    are handed back when the caller cancels serve as soon as they are active."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task(name="forever")
    async def forever() -> None:
        await trio.sleep_forever()

    with trio.fail_after(10):
        async with q.open():
            worker = echomq.Worker(q, concurrency=8)
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.serve)
                await until(lambda: worker.statistics().idle_waits > 0)
                handles = [await forever.delay() for _ in range(3)]
                for handle in handles:
                    await wait_state(q.connection, queue, handle.id, "active")
                nursery.cancel_scope.cancel()
            states = [await handle.info() for handle in handles]
    assert [s.state if s else None for s in states] == ["pending"] * 3
