"""The finished row (docs/results.md, "The finished row"): what a completed or cancelled
job's row keeps, what the finishing scripts delete, and ``keep_payload``."""

from __future__ import annotations

import pytest

import echomq
from echomq import admin, jobs
from echomq._scripts.keyspace import Keyspace
from echomq.errors import InvalidArgument

from ._support import server_now_ms

PAYLOAD = b'{"task":"app.noop","args":["' + b"x" * 100 + b'"]}'  # over 64 bytes
HEADERS = '{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}'
DAY_MS = 86_400_000


async def row(conn: echomq.Connection, ks: Keyspace, job_id: str) -> dict[bytes, bytes]:
    raw = await conn.execute("HGETALL", ks.job(job_id))
    return dict(zip(raw[::2], raw[1::2], strict=True))


async def encoding(conn: echomq.Connection, ks: Keyspace, job_id: str) -> bytes:
    found: bytes = await conn.execute("OBJECT", "ENCODING", ks.job(job_id))
    return found


async def held(conn: echomq.Connection, queue: str, job: jobs.NewJob) -> echomq.Claimed:
    """``job`` enqueued and claimed by a named worker (the row gets `worker`)."""
    (job_id,) = await jobs.enqueue_many(conn, queue, [job])
    (claimed,) = (await jobs.claim_batch(conn, queue, 60_000, worker="w-1")).jobs
    assert claimed.id == job_id
    return claimed


@pytest.mark.parametrize("verb", ["complete", "complete_many"])
async def test_a_completed_row_loses_the_running_jobs_fields(
    conn: echomq.Connection, queue: str, ks: Keyspace, verb: str
) -> None:
    """The lease's fields, the headers and a priority of 0 go; the outcome comes; the row
    never holds more fields than it did while it ran."""
    c = await held(conn, queue, jobs.NewJob(payload=PAYLOAD, task="app.noop", headers=HEADERS))
    running = await row(conn, ks, c.id)
    assert {b"lease_epoch", b"worker", b"headers", b"priority"} <= running.keys()
    if verb == "complete":
        await jobs.complete(conn, queue, c.id, c.token, b'"ok"')
    else:
        assert await jobs.complete_many(conn, queue, [(c.id, c.token, b'"ok"')]) == {c.id: "ok"}
    done = await row(conn, ks, c.id)
    assert set(done) == {
        b"state", b"payload", b"token", b"task", b"created_at", b"claimed_at",
        b"finished_at", b"result",
    }  # fmt: skip
    assert len(done) <= len(running)
    assert (done[b"state"], done[b"payload"], done[b"result"]) == (b"completed", PAYLOAD, b'"ok"')
    info = await jobs.get_job(conn, queue, c.id)
    assert info is not None
    assert (info.priority, info.max_attempts, info.failures, info.stalled) == (0, 1, 0, 0)
    assert (info.worker, info.lease_epoch) == (None, None)
    # the outcome is as before: the retention's TTL, the index, the stream's entry
    assert DAY_MS - 60_000 < await conn.execute("PTTL", ks.job(c.id)) <= DAY_MS
    assert await conn.execute("ZSCORE", ks.completed, c.id) is not None
    ((_, entry),) = await conn.execute("XRANGE", ks.completions, "-", "+")
    fields = dict(zip(entry[::2], entry[1::2], strict=True))
    assert (fields[b"result"], fields[b"failures"]) == (b'"ok"', b"0")


async def test_a_priority_other_than_0_and_the_counters_stay(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """What differs from the defaults is kept: a priority, max_attempts, failures."""
    job = jobs.NewJob(payload=b"p", priority=3, max_attempts=4)
    (job_id,) = await jobs.enqueue_many(conn, queue, [job])
    (first,) = await jobs.claim(conn, queue, 60_000)
    assert await jobs.fail(conn, queue, job_id, first.token, "boom", retry_delay_ms=0) == "retrying"
    (second,) = await jobs.claim(conn, queue, 60_000)
    await jobs.complete(conn, queue, job_id, second.token, b"r")
    done = await row(conn, ks, job_id)
    assert (done[b"priority"], done[b"max_attempts"], done[b"failures"]) == (b"3", b"4", b"1")
    assert b"lease_epoch" not in done


async def test_a_dead_row_is_kept_whole(conn: echomq.Connection, queue: str, ks: Keyspace) -> None:
    """reprocess_job runs a dead job again: its row keeps everything, keep_payload or not."""
    await jobs.enqueue(conn, queue, b"warm", delay_ms=600_000)  # the queue exists
    await admin.set_retention(conn, queue, keep_payload=False)
    c = await held(conn, queue, jobs.NewJob(payload=PAYLOAD, job_id="d", headers=HEADERS))
    assert await jobs.fail(conn, queue, c.id, c.token, "boom") == "dead"
    dead = await row(conn, ks, c.id)
    kept = (dead[b"payload"], dead[b"worker"], dead[b"headers"])
    assert kept == (PAYLOAD, b"w-1", HEADERS.encode())


@pytest.mark.parametrize("verb", ["complete", "complete_many"])
async def test_keep_payload_off_writes_a_compact_row_without_its_payload(
    conn: echomq.Connection, queue: str, ks: Keyspace, verb: str
) -> None:
    """keep_payload False: the row is written anew without its payload, a listpack (a
    payload over 64 bytes made it a hash table while it ran); every other field stays,
    and result(), get_job and the retention read it as before."""
    await jobs.enqueue(conn, queue, b"warm", delay_ms=600_000)  # the queue exists
    await admin.set_retention(conn, queue, keep_payload=False)
    assert (await admin.retention(conn, queue)).keep_payload is False
    job = jobs.NewJob(payload=PAYLOAD, task="app.noop", headers=HEADERS, dedup="k", dedup_ms=60_000)
    c = await held(conn, queue, job)
    await jobs.update_progress(conn, queue, c.id, 50)
    assert await encoding(conn, ks, c.id) == b"hashtable"
    before = await server_now_ms(conn)
    if verb == "complete":
        await jobs.complete(conn, queue, c.id, c.token, b'"ok"')
    else:
        assert await jobs.complete_many(conn, queue, [(c.id, c.token, b'"ok"')]) == {c.id: "ok"}
    done = await row(conn, ks, c.id)
    assert set(done) == {
        b"state", b"token", b"task", b"created_at", b"claimed_at", b"finished_at",
        b"result", b"dedup", b"progress",
    }  # fmt: skip
    assert (done[b"state"], done[b"result"], done[b"progress"]) == (b"completed", b'"ok"', b"50")
    assert await encoding(conn, ks, c.id) == b"listpack"
    assert int(done[b"finished_at"]) >= before
    assert DAY_MS - 60_000 < await conn.execute("PTTL", ks.job(c.id)) <= DAY_MS
    info = await jobs.get_job(conn, queue, c.id)
    assert info is not None and info.payload == b"" and info.result == b'"ok"'
    # complete again with the same token: already finished, nothing changed
    assert await jobs.complete_many(conn, queue, [(c.id, c.token, b"x")]) == {c.id: "ok"}
    assert await row(conn, ks, c.id) == done


async def test_keep_payload_off_keeps_a_cancelled_rows_reason(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A job its worker settled as cancelled: the compact row keeps its reason."""
    await jobs.enqueue(conn, queue, b"warm", delay_ms=600_000)  # the queue exists
    await admin.set_retention(conn, queue, keep_payload=False)
    c = await held(conn, queue, jobs.NewJob(payload=PAYLOAD))
    await jobs.complete(conn, queue, c.id, c.token, b"cancelled:enough")
    done = await row(conn, ks, c.id)
    assert (done[b"state"], done[b"cancel_reason"]) == (b"cancelled", b"enough")
    assert b"payload" not in done and b"worker" not in done
    assert await encoding(conn, ks, c.id) == b"listpack"
    assert await conn.execute("ZSCORE", ks.cancelled, c.id) is not None


async def test_keep_payload_is_a_bool_and_resets(conn: echomq.Connection, queue: str) -> None:
    """Only a bool is taken (checked before any I/O); None resets it to on, the default."""
    await jobs.enqueue(conn, queue, b"warm", delay_ms=600_000)  # the queue exists
    assert (await admin.retention(conn, queue)).keep_payload is True
    for bad in (0, 1, "off", 1.0):
        with pytest.raises(InvalidArgument):
            await admin.set_retention(conn, queue, keep_payload=bad)
    await admin.set_retention(conn, queue, keep_payload=False)
    r = await admin.retention(conn, queue)
    assert r.keep_payload is False and "keep_payload" in r.explicit
    await admin.set_retention(conn, queue, keep_payload=None)
    r = await admin.retention(conn, queue)
    assert r.keep_payload is True and "keep_payload" not in r.explicit
