"""Dedup modes (docs/repeat.md, "Dedup windows"): throttle (the key held for its window),
until_finished (held until the job finishes, whatever its outcome) and debounce (the
latest payload replaces a waiting holder's and the window starts again), each atomic in
enqueue.lua: 64 producers racing on one key make one job."""

from __future__ import annotations

import pytest
import trio

import echomq
from echomq import jobs
from echomq._scripts.keyspace import Keyspace
from echomq.errors import InvalidArgument
from echomq.jobs.lifecycle import gate_job


async def _race(
    conn: echomq.Connection, queue: str, mode: str, n: int = 64, **fields: object
) -> list[jobs.Enqueued]:
    """``n`` producers at once, each enqueuing one job under key ``k`` in ``mode``."""
    answers: list[jobs.Enqueued] = []

    async def one(i: int) -> None:
        job = jobs.NewJob(payload=f"p{i}".encode(), dedup="k", dedup_mode=mode, **fields)  # type: ignore[arg-type]
        answers.extend(await jobs.enqueue_batch(conn, queue, [job]))

    async with trio.open_nursery() as nursery:
        for i in range(n):
            nursery.start_soon(one, i)
    return answers


async def _pending(conn: echomq.Connection, queue: str) -> int:
    ks = Keyspace(queue)
    return int(await conn.execute("ZCARD", ks.pending)) + int(
        await conn.execute("ZCARD", ks.schedule)
    )


@pytest.mark.parametrize("mode", ["throttle", "until_finished", "debounce"])
async def test_sixty_four_producers_on_one_key_make_one_job(
    conn: echomq.Connection, queue: str, mode: str
) -> None:
    answers = await _race(conn, queue, mode, dedup_ms=60_000)
    written = [a for a in answers if not a.deduplicated]
    assert len(written) == 1 and len(answers) == 64
    assert {a.id for a in answers} == {written[0].id}
    assert await _pending(conn, queue) == 1


async def test_until_finished_holds_the_key_until_the_job_ends_then_frees_it(
    conn: echomq.Connection, queue: str
) -> None:
    first, again = await _race(conn, queue, "until_finished", n=2)
    assert first.id == again.id
    key = Keyspace(queue).base + "dedup:k"
    assert await conn.execute("PTTL", key) == -1  # no window: held until the finish
    (claimed,) = await jobs.claim(conn, queue, 30_000)
    held = await _race(conn, queue, "until_finished", n=8)  # still held while it runs
    assert {a.id for a in held} == {first.id}
    await jobs.complete(conn, queue, claimed.id, claimed.token, b'"done"')
    assert await conn.execute("EXISTS", key) == 0
    after = await _race(conn, queue, "until_finished", n=64)
    assert len({a.id for a in after}) == 1 and after[0].id != first.id
    # a dead job frees it too
    (claimed,) = await jobs.claim(conn, queue, 30_000)
    await jobs.fail(conn, queue, claimed.id, claimed.token, "boom", dead=True)
    assert await conn.execute("EXISTS", key) == 0


async def test_a_throttle_key_outlives_its_finished_job(
    conn: echomq.Connection, queue: str
) -> None:
    (first,) = await _race(conn, queue, "throttle", n=1, dedup_ms=60_000)
    (claimed,) = await jobs.claim(conn, queue, 30_000)
    await jobs.complete(conn, queue, claimed.id, claimed.token, b'"done"')
    (again,) = await _race(conn, queue, "throttle", n=1, dedup_ms=60_000)
    assert again.deduplicated and again.id == first.id


async def test_debounce_replaces_the_waiting_payload_and_restarts_its_delay(
    conn: echomq.Connection, queue: str
) -> None:
    ks = Keyspace(queue)
    answers = await _race(conn, queue, "debounce", n=64, dedup_ms=60_000, delay_ms=30_000)
    holder = {a.id for a in answers}
    assert len(holder) == 1
    (job_id,) = holder
    run_at = float(await conn.execute("ZSCORE", ks.schedule, job_id))
    pttl = int(await conn.execute("PTTL", ks.base + "dedup:k"))
    last = jobs.NewJob(payload=b"latest", dedup="k", dedup_mode="debounce", dedup_ms=90_000,
                       delay_ms=45_000)  # fmt: skip
    (answer,) = await jobs.enqueue_batch(conn, queue, [last])
    assert answer.deduplicated and answer.id == job_id
    info = await jobs.get_job(conn, queue, job_id)
    assert info is not None and info.payload == b"latest"
    assert float(await conn.execute("ZSCORE", ks.schedule, job_id)) > run_at + 10_000
    assert int(await conn.execute("PTTL", ks.base + "dedup:k")) > pttl + 20_000
    # a holder that already runs is not replaced: a plain dedup hit
    await conn.execute("ZADD", ks.schedule, 0, job_id)
    (claimed,) = await jobs.claim(conn, queue, 30_000)
    (late,) = await jobs.enqueue_batch(conn, queue, [jobs.NewJob(
        payload=b"too late", dedup="k", dedup_mode="debounce", dedup_ms=1000)])  # fmt: skip
    assert late.deduplicated and late.id == claimed.id
    running = await jobs.get_job(conn, queue, job_id)
    assert running is not None and running.payload == b"latest"


async def test_bad_dedup_options_are_refused_before_any_io() -> None:
    with pytest.raises(InvalidArgument, match="dedup_mode is one of"):
        gate_job(jobs.NewJob(payload=b"p", dedup="k", dedup_ms=1, dedup_mode="nope"))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="dedup_ms"):
        gate_job(jobs.NewJob(payload=b"p", dedup="k", dedup_mode="debounce"))
    with pytest.raises(InvalidArgument, match="dedup_mode needs a dedup key"):
        echomq.EnqueueOptions(dedup_mode="debounce")
    # until_finished needs no window
    echomq.EnqueueOptions(dedup="k", dedup_mode="until_finished")
