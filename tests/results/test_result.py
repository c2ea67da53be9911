"""result() that cannot miss (docs/results.md): the row, then the completions stream, one
reader per queue; late calls, reconnects, removals, many waiters, the blocking twin."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import trio
import trio.testing

import echomq
from _waits import until
from echomq import admin, jobs
from echomq._model.cancel import cancelled_result
from echomq._scripts.keyspace import Keyspace
from echomq.errors import JobCancelled, JobFailed, JobGone
from echomq.testing import open_fault_proxy


def make_queue(name: str, url: str) -> tuple[echomq.Queue, echomq.Task]:
    q = echomq.Queue(name, url=url)

    @q.task(name="t.noop")
    async def noop(n: int) -> int:
        return n

    return q, noop


async def finish(conn: echomq.Connection, queue: str, count: int, result: bytes) -> int:
    """Claim and complete up to ``count`` jobs through the verbs (no worker); answer how many."""
    done = 0
    while done < count:
        held = await jobs.claim(conn, queue, 60_000, count=min(250, count - done))
        if not held:
            return done
        async with trio.open_nursery() as nursery:
            for c in held:
                nursery.start_soon(jobs.complete, conn, queue, c.id, c.token, result)
        done += len(held)
    return done


async def readers_blocked(conn: echomq.Connection, key: str) -> int:
    """Clients blocked in XREAD on the node holding ``key`` (the feed waits there)."""
    from _waits import _at

    listing: bytes = await _at(conn, key, "CLIENT", "LIST")
    blocked = 0
    for line in listing.decode().splitlines():
        fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
        if fields.get("cmd") == "xread" and "b" in fields.get("flags", ""):
            blocked += 1
    return blocked


async def reader_blocked(conn: echomq.Connection, key: str) -> bool:
    return await readers_blocked(conn, key) > 0


@pytest.mark.single_node("the issue's repro: 15,000 jobs, kept fast on one server")
async def test_fifteen_thousand_finished_jobs_all_answer(redis_url: str, queue: str) -> None:
    """The issue's repro: 15,000 jobs finished in a few seconds, then result() on each:
    every one answers (0.1 trimmed completed rows to 10,000 by count: 5,000 JobGone)."""
    q, noop = make_queue(queue, redis_url)
    with trio.fail_after(120):
        async with q.open():
            conn = q.connection
            new = [noop.new_job((i,)) for i in range(15_000)]
            ids: list[str] = []
            for i in range(0, len(new), 250):
                ids += await jobs.enqueue_many(conn, queue, new[i : i + 250])
            assert await finish(conn, queue, 15_000, b"7") == 15_000
            handles = [q.handle(job_id) for job_id in ids]
            answers: list[object] = []

            async def ask(batch: Sequence[echomq.TaskHandle]) -> None:
                for handle in batch:
                    answers.append(await handle.result(timeout=10))

            async with trio.open_nursery() as nursery:
                for i in range(0, len(handles), 500):
                    nursery.start_soon(ask, handles[i : i + 500])
    assert answers == [7] * 15_000


async def test_a_late_call_reads_the_row(redis_url: str, queue: str) -> None:
    """Finished before anyone asked: the row answers, completed, dead or cancelled."""
    q, noop = make_queue(queue, redis_url)
    with trio.fail_after(10):
        async with q.open():
            ok, dead, stopped = [await noop.delay(i) for i in range(3)]
            conn = q.connection
            held = {c.id: c for c in await jobs.claim(conn, queue, 60_000, count=3)}
            await jobs.complete(conn, queue, ok.id, held[ok.id].token, b"1")
            await jobs.fail(conn, queue, dead.id, held[dead.id].token, "kaput", dead=True)
            reason = cancelled_result("enough")
            await jobs.complete(conn, queue, stopped.id, held[stopped.id].token, reason)
            assert await ok.result(timeout=1) == 1
            with pytest.raises(JobFailed) as failed:
                await dead.result(timeout=1)
            with pytest.raises(JobCancelled) as cancelled:
                await stopped.result(timeout=1)
    assert failed.value.error == "kaput" and cancelled.value.reason == "enough"


async def test_a_row_kept_without_its_payload_answers_late_and_waiting_calls(
    redis_url: str, queue: str
) -> None:
    """keep_payload False (docs/results.md, "The finished row"): the compact row still
    records the outcome, for a late call and for a waiter."""
    q, noop = make_queue(queue, redis_url)
    with trio.fail_after(10):
        async with q.open():
            conn = q.connection
            late = await noop.delay(7)
            await admin.set_retention(conn, queue, keep_payload=False)
            assert await finish(conn, queue, 1, b"7") == 1
            assert await late.result(timeout=1) == 7
            waiting = await noop.delay(8)
            got: list[object] = []
            async with trio.open_nursery() as nursery:

                async def wait() -> None:
                    got.append(await waiting.result(timeout=8))

                nursery.start_soon(wait)
                await until(lambda: reader_blocked(conn, Keyspace(queue).completions))
                await finish(conn, queue, 1, b"8")
            info = await jobs.get_job(conn, queue, waiting.id)
            assert info is not None and info.payload == b""
    assert got == [8]


async def test_a_waiter_is_answered_from_the_stream_without_polling(
    redis_url: str, queue: str
) -> None:
    """The reader blocks in XREAD (no polling); the completion's entry wakes the waiter,
    even when the row is not kept at all (keep_result=0)."""
    q, noop = make_queue(queue, redis_url)
    with trio.fail_after(10):
        async with q.open():
            handle = await noop.apply((5,), keep_result=0)
            got: list[object] = []
            async with trio.open_nursery() as nursery:

                async def wait() -> None:
                    got.append(await handle.result(timeout=8))

                nursery.start_soon(wait)
                await until(lambda: reader_blocked(q.connection, Keyspace(queue).completions))
                feed = await q.result_feed()
                assert feed.waiting == 1 and feed.statistics.reads == 0
                await finish(q.connection, queue, 1, b"5")
            assert await jobs.get_job(q.connection, queue, handle.id) is None  # not kept
            with pytest.raises(JobGone, match="retention"):
                await handle.result(timeout=1)  # a late call: the row is the record
    assert got == [5]


async def test_a_cancelled_waiting_job_answers_its_waiters(redis_url: str, queue: str) -> None:
    """cancel of a waiting job deletes the row but writes the cancelled entry: a waiter
    (not the one who cancelled) learns the reason."""
    q, noop = make_queue(queue, redis_url)
    with trio.fail_after(10):
        async with q.open():
            handle = await noop.delay(1)
            other = q.handle(handle.id)  # another handle: it did not cancel
            async with trio.open_nursery() as nursery:
                caught: list[JobCancelled] = []

                async def wait() -> None:
                    with pytest.raises(JobCancelled) as exc:
                        await other.result(timeout=8)
                    caught.append(exc.value)

                nursery.start_soon(wait)
                await until(lambda: reader_blocked(q.connection, Keyspace(queue).completions))
                await handle.cancel("changed my mind")
    assert caught[0].reason == "changed my mind"


async def test_a_removed_job_is_gone_for_its_waiter(redis_url: str, queue: str) -> None:
    """remove_job writes no entry (not an outcome): the reader's row check finds it gone."""
    q, noop = make_queue(queue, redis_url)
    q.result_gone_check = 0.05
    with trio.fail_after(10):
        async with q.open():
            handle = await noop.delay(1)
            async with trio.open_nursery() as nursery:

                async def wait() -> None:
                    with pytest.raises(JobGone):
                        await handle.result(timeout=8)

                nursery.start_soon(wait)
                await until(lambda: reader_blocked(q.connection, Keyspace(queue).completions))
                await jobs.remove_job(q.connection, queue, handle.id)


async def test_thousands_of_waiters_share_one_reader(redis_url: str, queue: str) -> None:
    """1,000 waiters: one blocked XREAD serves them all (one read per batch of entries,
    whatever the number of waiters), and every one gets its own answer."""
    q, noop = make_queue(queue, redis_url)
    n = 1_000
    with trio.fail_after(60):
        async with q.open():
            new = [noop.new_job((i,)) for i in range(n)]
            ids: list[str] = []
            for i in range(0, n, 250):
                ids += await jobs.enqueue_many(q.connection, queue, new[i : i + 250])
            feed = await q.result_feed()
            answers: dict[str, object] = {}
            async with trio.open_nursery() as nursery:

                async def wait(job_id: str) -> None:
                    answers[job_id] = await q.handle(job_id).result(timeout=50)

                for job_id in ids:
                    nursery.start_soon(wait, job_id)
                await until(lambda: feed.waiting == n, within=30)
                await until(lambda: reader_blocked(q.connection, Keyspace(queue).completions))
                assert await readers_blocked(q.connection, Keyspace(queue).completions) == 1
                held = await jobs.claim(q.connection, queue, 60_000, count=250)
                while held:
                    for c in held:
                        value = q.codec.decode_call(c.payload).args[0]
                        await jobs.complete(q.connection, queue, c.id, c.token, str(value))
                    held = await jobs.claim(q.connection, queue, 60_000, count=250)
    assert answers == {job_id: i for i, job_id in enumerate(ids)}
    stats = feed.statistics
    assert stats.delivered == stats.entries == n
    assert stats.reads <= stats.entries + 2  # a read answers entries (or times out)


@pytest.mark.single_node("the fault proxy fronts one server")
async def test_a_reconnect_loses_no_result(redis_url: str, queue: str) -> None:
    """The reader's connection is cut while it waits and the job completes meanwhile: the
    reader reconnects, reads on from where it was (and re-reads the waited rows)."""
    async with open_fault_proxy(redis_url) as proxy:
        q, noop = make_queue(queue, proxy.url)
        with trio.fail_after(15):
            async with q.open(), echomq.connect(redis_url) as direct:
                first, second = await noop.delay(1), await noop.delay(2)
                got: list[object] = []
                async with trio.open_nursery() as nursery:

                    async def wait(handle: echomq.TaskHandle) -> None:
                        got.append(await handle.result(timeout=12))

                    nursery.start_soon(wait, first)
                    await until(lambda: reader_blocked(direct, Keyspace(queue).completions))
                    with proxy.refusing():
                        await proxy.cut()
                        await finish(direct, queue, 1, b"1")  # while the reader is away
                    nursery.start_soon(wait, second)
                    await until(lambda: len(got) == 1)
                    await finish(direct, queue, 1, b"2")
                feed = await q.result_feed()
    assert got == [1, 2] and feed.statistics.redis_errors >= 1


async def test_result_sync_waits_on_the_stream(redis_url: str, queue: str) -> None:
    """The blocking twin: a late call, and a wait answered by the entry."""
    q, noop = make_queue(queue, redis_url)
    with trio.fail_after(15):
        async with q.open():
            done, later = await noop.delay(3), await noop.delay(4)
            await finish(q.connection, queue, 1, b"3")
            assert await trio.to_thread.run_sync(done.result_sync, 2) == 3
            with pytest.raises(TimeoutError):
                await trio.to_thread.run_sync(later.result_sync, 0.05)
            async with trio.open_nursery() as nursery:
                got: list[object] = []

                def wait() -> None:
                    got.append(later.result_sync(10))

                nursery.start_soon(trio.to_thread.run_sync, wait)
                await until(lambda: reader_blocked(q.connection, Keyspace(queue).completions))
                await finish(q.connection, queue, 1, b"4")
    assert got == [4]
    q.sync_connection().close()


async def test_stats_throughput_survives_retention(redis_url: str, queue: str) -> None:
    """15 completions with keep_result=0: none retained, all counted by the minute."""
    q, noop = make_queue(queue, redis_url)
    async with q.open():
        for i in range(15):
            await noop.apply((i,), keep_result=0)
        await finish(q.connection, queue, 15, b"0")
        stats = await admin.stats(q.connection, queue, minutes=2)
    assert stats.completed == 0 and sum(stats.completed_per_minute) == 15


async def test_the_sweeping_worker_warns_when_the_count_guard_was_hit(
    redis_url: str, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A row deleted by the guard before its time is reported: QueueStats.capped and one
    warning from the worker that sweeps (at most once a minute)."""
    from echomq._worker.sweeper import Sweeper

    q, noop = make_queue(queue, redis_url)
    async with q.open():
        conn = q.connection
        await admin.ensure_schema(conn, queue)  # the queue exists first
        await admin.set_retention(conn, queue, max_completed=1)
        sweeper = Sweeper(conn, queue, "stalled", interval=1.0, max_stalled=1)
        assert await sweeper.sweep_once()
        for i in range(3):
            await noop.delay(i)
        await finish(conn, queue, 3, b"0")
        with caplog.at_level("WARNING", logger="echomq.worker"):
            await conn.execute("DEL", Keyspace(queue).sweep_guard)
            assert await sweeper.sweep_once()
            await conn.execute("DEL", Keyspace(queue).sweep_guard)
            assert await sweeper.sweep_once()  # within the minute: no second warning
        assert (await admin.capped(conn, queue)).completed == 2
    warnings = [r.getMessage() for r in caplog.records if "count guard" in r.getMessage()]
    assert len(warnings) == 1 and "deleted 2 completed rows" in warnings[0]
