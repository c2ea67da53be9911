"""The payload size limit: a payload, job data or result over ``config.max_payload()``
(default 64 MiB, below Redis's proto-max-bulk-len of 512 MiB) raises ``PayloadTooLarge``
(a ``SerializationError``) before any write, on the trio verbs and the sync producer."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import trio

import echomq
import echomq.sync
from echomq import config, jobs
from echomq._scripts.keyspace import Keyspace
from echomq.errors import InvalidArgument, PayloadTooLarge, SerializationError

from ._support import snapshot

LIMIT = 1024


@pytest.fixture
def small_limit() -> Iterator[int]:
    config.set_max_payload(LIMIT)
    try:
        yield LIMIT
    finally:
        config.set_max_payload(config.DEFAULT_MAX_PAYLOAD)


def test_the_default_and_the_setter() -> None:
    """64 MiB by default; the setter takes an int in 1..512 MiB."""
    assert config.max_payload() == config.DEFAULT_MAX_PAYLOAD == 64 * 2**20
    for bad in (0, -1, 512 * 2**20 + 1, True, 1.5, "1024"):
        with pytest.raises(InvalidArgument):
            config.set_max_payload(bad)  # type: ignore[arg-type]
    assert config.max_payload() == config.DEFAULT_MAX_PAYLOAD
    assert issubclass(PayloadTooLarge, SerializationError)
    assert issubclass(PayloadTooLarge, ValueError)


async def test_default_limit_refuses_before_any_io(closed_port_url: str, queue: str) -> None:
    """64 MiB + 1 is refused without reaching the wire (nothing listens at that URL)."""
    big = b"x" * (config.DEFAULT_MAX_PAYLOAD + 1)
    async with echomq.connect(closed_port_url) as conn:
        with pytest.raises(PayloadTooLarge) as caught:
            await jobs.enqueue(conn, queue, big)
    assert (caught.value.size, caught.value.limit) == (len(big), config.DEFAULT_MAX_PAYLOAD)
    assert "payload is 67108865 bytes, over the limit of 67108864 bytes" in str(caught.value)


async def test_enqueue_and_enqueue_many_refuse_and_write_nothing(
    conn: echomq.Connection, queue: str, small_limit: int
) -> None:
    ks = Keyspace(queue)
    await jobs.enqueue(conn, queue, b"x" * small_limit)  # at the limit: accepted
    before = await snapshot(conn, ks)
    with pytest.raises(PayloadTooLarge):
        await jobs.enqueue(conn, queue, b"x" * (small_limit + 1))
    with pytest.raises(PayloadTooLarge):  # a str counts its UTF-8 bytes
        await jobs.enqueue(conn, queue, "é" * (small_limit // 2 + 1))
    batch = [jobs.NewJob(payload=b"ok"), jobs.NewJob(payload=b"x" * (small_limit + 1))]
    with pytest.raises(PayloadTooLarge):
        await jobs.enqueue_many(conn, queue, batch)
    assert await snapshot(conn, ks) == before


async def test_a_batch_over_its_total_is_refused(
    conn: echomq.Connection, queue: str, small_limit: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each payload fits, the batch does not: refused whole (the server's query buffer)."""
    monkeypatch.setattr(config, "MAX_BATCH_BYTES", 3 * small_limit)
    batch = [jobs.NewJob(payload=b"x" * small_limit) for _ in range(4)]
    with pytest.raises(PayloadTooLarge, match="the batch's payloads"):
        await jobs.enqueue_many(conn, queue, batch)
    assert await snapshot(conn, Keyspace(queue)) == {}


async def test_update_data_and_complete_refuse_and_change_nothing(
    conn: echomq.Connection, queue: str, small_limit: int
) -> None:
    """Job data and a result over the limit: refused; the held job can still complete."""
    ks = Keyspace(queue)
    job_id = await jobs.enqueue(conn, queue, b"small")
    [held] = await jobs.claim(conn, queue, 30_000)
    before = await snapshot(conn, ks)
    with pytest.raises(PayloadTooLarge, match="payload"):
        await jobs.update_data(conn, queue, job_id, b"x" * (small_limit + 1))
    with pytest.raises(PayloadTooLarge, match="result"):
        await jobs.complete(conn, queue, job_id, held.token, b"x" * (small_limit + 1))
    assert await snapshot(conn, ks) == before
    await jobs.complete(conn, queue, job_id, held.token, b"fits")
    info = await jobs.get_job(conn, queue, job_id)
    assert info is not None and info.state == "completed" and info.result == b"fits"


def test_sync_producer_refuses_before_any_io(closed_port_url: str, small_limit: int) -> None:
    with echomq.sync.connect(closed_port_url) as mq:
        with pytest.raises(PayloadTooLarge):
            mq.enqueue("q", b"x" * (small_limit + 1))
        with pytest.raises(PayloadTooLarge):
            mq.enqueue_many("q", [jobs.NewJob(payload=b"x" * (small_limit + 1))])


async def test_task_delay_refuses_a_huge_argument(
    redis_url: str, queue: str, small_limit: int
) -> None:
    """Through the app: send.delay(huge) raises before anything is written."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task
    async def send(text: str) -> None:
        return None

    async with q.open():
        with pytest.raises(PayloadTooLarge):
            await send.delay("x" * small_limit)
        with pytest.raises(PayloadTooLarge):
            send.delay_sync("x" * small_limit)
        assert await snapshot(q.connection, Keyspace(queue)) == {}


async def test_a_task_returning_a_result_over_the_limit_fails_dead_and_the_worker_lives(
    redis_url: str, queue: str, small_limit: int
) -> None:
    """The complete verb refuses the result before writing; the job ends dead with the
    reason, and the worker goes on with the next job."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task
    async def huge() -> str:
        return "x" * small_limit

    @q.task
    async def fine() -> str:
        return "ok"

    worker = echomq.Worker(q, concurrency=2)
    with trio.fail_after(15):
        async with q.open(), trio.open_nursery() as nursery:
            await nursery.start(worker.serve)
            big = await huge.delay()
            with pytest.raises(echomq.JobFailed) as caught:
                await big.result(timeout=10)
            assert await (await fine.delay()).result(timeout=10) == "ok"
            worker.shutdown(grace=0)
    assert caught.value.error is not None and "PayloadTooLarge" in caught.value.error
    assert "over the limit of 1024 bytes" in caught.value.error
