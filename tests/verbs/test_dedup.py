"""Dedup windows (docs/repeat.md): a dedup key holds the first job's id for its window.

A second enqueue under a held key writes nothing and answers the holder; the key goes when
the window ends, or when the holding job is removed (seed 004), never at completion.
"""

from __future__ import annotations

import pytest
import trio

import echomq
from echomq import jobs
from echomq._scripts.keyspace import Keyspace
from echomq.errors import DuplicateJob, InvalidArgument, InvalidKey

from ._support import claim_one, eventually, snapshot

WINDOW = 60_000  # ms: long enough never to lapse inside a test that does not wait for it


def dedup_job(key: str, payload: bytes = b"p", window: int = WINDOW, **kw: object) -> jobs.NewJob:
    return jobs.NewJob(payload=payload, dedup=key, dedup_ms=window, **kw)  # type: ignore[arg-type]


async def test_a_second_enqueue_inside_the_window_answers_the_first(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """The key holds the first id with its window as TTL; the second call writes nothing."""
    (first,) = await jobs.enqueue_batch(conn, queue, [dedup_job("order-42", b"one")])
    assert not first.deduplicated
    assert await conn.execute("GET", ks.dedup("order-42")) == first.id.encode()
    assert 0 < await conn.execute("PTTL", ks.dedup("order-42")) <= WINDOW
    info = await jobs.get_job(conn, queue, first.id)
    assert info is not None and info.dedup == "order-42"
    before = await snapshot(conn, ks)
    (second,) = await jobs.enqueue_batch(conn, queue, [dedup_job("order-42", b"two")])
    assert second == jobs.Enqueued(id=first.id, deduplicated=True)
    assert await snapshot(conn, ks) == before
    assert await jobs.enqueue_many(conn, queue, [dedup_job("order-42")]) == [first.id]


async def test_the_key_is_released_when_the_window_ends(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    (first,) = await jobs.enqueue_batch(conn, queue, [dedup_job("w", window=30)])

    async def gone() -> bool:
        return await conn.execute("EXISTS", ks.dedup("w")) == 0

    await eventually(gone)
    (second,) = await jobs.enqueue_batch(conn, queue, [dedup_job("w")])
    assert not second.deduplicated and second.id != first.id


async def test_completion_does_not_release_the_key(conn: echomq.Connection, queue: str) -> None:
    """Throttle, not debounce-until-done: the window holds whatever becomes of the job."""
    (first,) = await jobs.enqueue_batch(conn, queue, [dedup_job("t")])
    held = await claim_one(conn, queue)
    await jobs.complete(conn, queue, held.id, held.token, b"done")
    (again,) = await jobs.enqueue_batch(conn, queue, [dedup_job("t")])
    assert again == jobs.Enqueued(id=first.id, deduplicated=True)


async def test_remove_job_releases_the_key_it_holds(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """Seed 004: remove_job gives a held dedup key back."""
    (first,) = await jobs.enqueue_batch(conn, queue, [dedup_job("r")])
    await jobs.remove_job(conn, queue, first.id)
    assert await conn.execute("EXISTS", ks.dedup("r")) == 0
    (second,) = await jobs.enqueue_batch(conn, queue, [dedup_job("r")])
    assert not second.deduplicated


async def test_remove_job_leaves_a_key_another_job_holds(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """The key lapsed and a later job took it: removing the first job keeps the second's."""
    (first,) = await jobs.enqueue_batch(conn, queue, [dedup_job("k", window=30)])

    async def gone() -> bool:
        return await conn.execute("EXISTS", ks.dedup("k")) == 0

    await eventually(gone)
    (second,) = await jobs.enqueue_batch(conn, queue, [dedup_job("k")])
    await jobs.remove_job(conn, queue, first.id)
    assert await conn.execute("GET", ks.dedup("k")) == second.id.encode()


async def test_cancel_of_a_waiting_job_releases_its_key_and_finishes_it(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """Both at once: the key is given back and the job finishes as cancelled (its
    completions entry, the cancelled counter; docs/results.md)."""
    (first,) = await jobs.enqueue_batch(conn, queue, [dedup_job("c", task="app.c")])
    assert await echomq.cancel.request(conn, queue, first.id, "not needed") == "removed"
    assert await conn.execute("EXISTS", ks.dedup("c")) == 0
    [(_, fields)] = await conn.execute("XRANGE", ks.completions, "-", "+")
    entry = dict(zip(fields[::2], fields[1::2], strict=True))
    assert (entry[b"id"], entry[b"state"], entry[b"task"]) == (
        first.id.encode(), b"cancelled", b"app.c",
    )  # fmt: skip
    assert await conn.execute("HGET", ks.metrics_cancelled, "count") == b"1"


async def test_a_dedup_job_keeps_the_results_fields_on_its_row(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """The enqueue writes the dedup key and the task / retention fields on the same row;
    a deduplicated item writes neither."""
    job = dedup_job("f", task="app.f", keep_result_ms=5_000, keep_dead_ms=9_000)
    (first,) = await jobs.enqueue_batch(conn, queue, [job])
    row = await conn.execute("HMGET", ks.job(first.id), "dedup", "task", "keep_result", "keep_dead")
    assert row == [b"f", b"app.f", b"5000", b"9000"]
    (again,) = await jobs.enqueue_batch(conn, queue, [dedup_job("f", task="app.other")])
    assert again.deduplicated
    assert await conn.execute("HGET", ks.job(first.id), "task") == b"app.f"
    held = await claim_one(conn, queue)
    await jobs.complete(conn, queue, held.id, held.token, b"ok")
    assert 0 < await conn.execute("PTTL", ks.job(first.id)) <= 5_000


async def test_enqueue_many_honours_dedup_per_item(conn: echomq.Connection, queue: str) -> None:
    """Within one call the first item with a key takes it; later items with it answer it."""
    (held,) = await jobs.enqueue_batch(conn, queue, [dedup_job("held")])
    answers = await jobs.enqueue_batch(
        conn,
        queue,
        [
            dedup_job("a", b"1"),
            dedup_job("a", b"2"),
            jobs.NewJob(payload=b"plain"),
            dedup_job("held", b"3"),
            dedup_job("b", b"4", delay_ms=10_000),
        ],
    )
    assert [a.deduplicated for a in answers] == [False, True, False, True, False]
    assert answers[1].id == answers[0].id
    assert answers[3].id == held.id
    stats = await echomq.admin.stats(conn, queue)
    assert (stats.pending, stats.scheduled) == (3, 1)


async def test_an_existing_job_id_is_still_refused(conn: echomq.Connection, queue: str) -> None:
    """Dedup keys do not change explicit ids: an existing id refuses the whole call."""
    await jobs.enqueue(conn, queue, b"x", job_id="fixed")
    with pytest.raises(DuplicateJob):
        await jobs.enqueue_batch(conn, queue, [dedup_job("d", job_id="fixed")])


async def test_64_concurrent_producers_make_exactly_one_job(
    redis_url: str, queue: str, ks: Keyspace
) -> None:
    """64 producers on 64 connections apply the same key at once: one job, one holder."""
    answers: list[jobs.Enqueued] = []
    ready = trio.Event()

    async def producer(n: int) -> None:
        async with echomq.connect(redis_url) as c:
            await c.execute("PING")
            await ready.wait()
            (answer,) = await jobs.enqueue_batch(c, queue, [dedup_job("order-42", str(n))])
            answers.append(answer)

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            for n in range(64):
                nursery.start_soon(producer, n)
            await trio.testing.wait_all_tasks_blocked()
            ready.set()
    assert len(answers) == 64
    assert len({a.id for a in answers}) == 1
    assert sum(not a.deduplicated for a in answers) == 1
    async with echomq.connect(redis_url) as c:
        stats = await echomq.admin.stats(c, queue)
        assert stats.pending == 1


async def test_bad_dedup_input_is_refused_before_any_io(closed_port_url: str) -> None:
    """A bad key or window raises before the wire is touched (nothing listens there)."""
    async with echomq.connect(closed_port_url) as c:
        for job, error in (
            (jobs.NewJob(payload=b"", dedup="bad key", dedup_ms=10), InvalidKey),
            (jobs.NewJob(payload=b"", dedup="k", dedup_ms=0), InvalidArgument),
            (jobs.NewJob(payload=b"", dedup="k", dedup_ms=-5), InvalidArgument),
        ):
            with pytest.raises(error):
                await jobs.enqueue_batch(c, "q", [job])
