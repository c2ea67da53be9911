"""enqueue and enqueue_many: the row written, duplicates refused, all or nothing."""

from __future__ import annotations

import os
import threading
import warnings

import attrs
import pytest

import echomq
from echomq import jobs
from echomq._scripts.calls import ScriptCall, evaluate
from echomq._scripts.keyspace import Keyspace
from echomq.errors import DuplicateJob, InvalidArgument
from echomq.jobs import lifecycle as life

from ._support import server_now_ms, snapshot


async def test_enqueue_writes_a_pending_row(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """The row holds the payload, zeroed counters and options; the id is pending."""
    before = await server_now_ms(conn)
    job_id = await jobs.enqueue(conn, queue, b"\x00binary\xff", priority=7, max_attempts=4)
    info = await jobs.get_job(conn, queue, job_id)
    assert info is not None
    assert info.state is echomq.JobState.PENDING
    assert info.payload == b"\x00binary\xff"
    assert (info.token, info.failures, info.stalled) == (0, 0, 0)
    assert (info.priority, info.max_attempts) == (7, 4)
    assert info.created_at is not None and info.created_at >= before
    assert await conn.execute("ZSCORE", ks.pending, job_id) is not None
    assert await conn.execute("LLEN", ks.wake) == 1


async def test_enqueue_with_delay_writes_a_scheduled_row(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A delayed job is scheduled at server now + delay and wakes nobody."""
    before = await server_now_ms(conn)
    job_id = await jobs.enqueue(conn, queue, "text payload", delay_ms=10_000, job_id="later-1")
    assert job_id == "later-1"
    info = await jobs.get_job(conn, queue, job_id)
    assert info is not None
    assert info.state is echomq.JobState.SCHEDULED
    assert info.payload == b"text payload"
    assert info.run_at is not None and info.run_at >= before + 10_000
    assert float(await conn.execute("ZSCORE", ks.schedule, job_id)) == info.run_at
    assert await conn.execute("EXISTS", ks.wake) == 0


async def test_generated_ids_are_unique(conn: echomq.Connection, queue: str) -> None:
    """Without job_id every enqueue gets a fresh id."""
    ids = {await jobs.enqueue(conn, queue, b"") for _ in range(20)}
    assert len(ids) == 20


async def test_duplicate_id_is_refused_and_nothing_is_written(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """An existing job_id raises DuplicateJob; the row and every set stay as they were."""
    await jobs.enqueue(conn, queue, b"original", job_id="welcome-42")
    before = await snapshot(conn, ks)
    with pytest.raises(DuplicateJob):
        await jobs.enqueue(conn, queue, b"copy", job_id="welcome-42", delay_ms=5)
    assert await snapshot(conn, ks) == before


async def test_enqueue_many_answers_ids_in_order(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """One call enqueues every job, ready ones in order, one wake token for the batch."""
    batch = [jobs.NewJob(payload=str(i), job_id=f"job-{i}") for i in range(5)]
    batch.append(jobs.NewJob(payload=b"later", delay_ms=60_000))
    ids = await jobs.enqueue_many(conn, queue, batch)
    assert ids[:5] == [f"job-{i}" for i in range(5)]
    assert await conn.execute("ZRANGE", ks.pending, 0, -1) == [i.encode() for i in ids[:5]]
    assert await conn.execute("ZRANGE", ks.schedule, 0, -1) == [ids[5].encode()]
    assert await conn.execute("LRANGE", ks.wake, 0, -1) == [b"1"]


@pytest.mark.parametrize("clash", ["existing", "repeated"])
async def test_enqueue_many_is_all_or_nothing(
    conn: echomq.Connection, queue: str, ks: Keyspace, clash: str
) -> None:
    """One bad id (existing, or repeated in the call) refuses the whole batch."""
    await jobs.enqueue(conn, queue, b"", job_id="taken")
    before = await snapshot(conn, ks)
    bad = "taken" if clash == "existing" else "twice"
    batch = [
        jobs.NewJob(payload=b"a", job_id="fresh-1"),
        jobs.NewJob(payload=b"b", job_id="twice"),
        jobs.NewJob(payload=b"c", job_id=bad),
        jobs.NewJob(payload=b"d", delay_ms=10),
    ]
    with pytest.raises(DuplicateJob, match=bad):
        await jobs.enqueue_many(conn, queue, batch)
    assert await snapshot(conn, ks) == before


async def test_empty_payload_round_trips(conn: echomq.Connection, queue: str) -> None:
    """An empty payload is a payload: claimable and read back as b''."""
    job_id = await jobs.enqueue(conn, queue, b"")
    [held] = await jobs.claim(conn, queue, 1_000)
    assert (held.id, held.payload) == (job_id, b"")


async def test_get_job_of_missing_row_is_none(conn: echomq.Connection, queue: str) -> None:
    """No row: get_job answers None."""
    assert await jobs.get_job(conn, queue, "nobody") is None


async def test_the_row_is_stored_as_text_numbers(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """Every number on a new row is its decimal text (the script passes text, not Lua
    numbers): the token, priority, created_at and run_at = created_at + delay. The
    counters start absent (0), as do options at their default."""
    (job_id,) = await jobs.enqueue_many(
        conn,
        queue,
        [jobs.NewJob(payload=b"p", priority=-7, max_attempts=3, delay_ms=1_234, task="t")],
    )
    raw = await conn.execute("HGETALL", ks.job(job_id))
    row = dict(zip(raw[::2], raw[1::2], strict=True))
    assert row[b"token"] == b"0" and b"failures" not in row and b"stalled" not in row
    assert (row[b"priority"], row[b"max_attempts"], row[b"task"]) == (b"-7", b"3", b"t")
    assert row[b"created_at"].isdigit() and row[b"run_at"].isdigit()
    assert int(row[b"run_at"]) == int(row[b"created_at"]) + 1_234
    assert await conn.execute("ZSCORE", ks.schedule, job_id) == row[b"run_at"]
    (plain,) = await jobs.enqueue_many(conn, queue, [jobs.NewJob(payload=b"p")])
    raw = await conn.execute("HGETALL", ks.job(plain))
    fields = set(raw[::2])
    # the counters and max_attempts at their defaults: absent; priority: every row has it
    assert fields == {b"state", b"payload", b"token", b"priority", b"created_at"}


async def test_a_held_dedup_key_answers_before_an_existing_id_refuses(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """An existing id under a held dedup key answers the holder (its id is not checked);
    an existing id elsewhere in the call refuses the whole call, with nothing written."""
    holder = await jobs.enqueue_many(
        conn, queue, [jobs.NewJob(payload=b"h", job_id="taken", dedup="k", dedup_ms=60_000)]
    )
    fresh = [jobs.NewJob(payload=b"x") for _ in range(3)]
    answers = await jobs.enqueue_batch(
        conn, queue, [*fresh, jobs.NewJob(payload=b"y", job_id="taken", dedup="k", dedup_ms=1)]
    )
    assert [a.deduplicated for a in answers] == [False, False, False, True]
    assert answers[3].id == holder[0]
    before = await snapshot(conn, ks)
    with pytest.raises(DuplicateJob, match="taken"):
        await jobs.enqueue_many(
            conn, queue, [jobs.NewJob(payload=b"z"), jobs.NewJob(payload=b"y", job_id="taken")]
        )
    assert await snapshot(conn, ks) == before


def test_new_ids_are_distinct_across_threads_and_a_fork() -> None:
    """new_id hands out pooled random ids: each once across threads; a forked child does
    not repeat the parent's pool."""
    jobs.new_id()  # the pool holds ids now
    found: list[list[str]] = []

    def take() -> None:
        found.append([jobs.new_id() for _ in range(5_000)])

    threads = [threading.Thread(target=take) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ids = [i for part in found for i in part]
    assert len(set(ids)) == len(ids) == 20_000
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    read, write = os.pipe()
    with warnings.catch_warnings():  # 3.12 warns of a fork with threads alive
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: its first id, then out
        os.write(write, jobs.new_id().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 64).decode()
    os.close(read)
    assert len(child) == 32 and child != jobs.new_id()


async def test_jobs_with_different_options_in_one_call_keep_their_own(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A call's jobs share option sets only when equal: each row gets its own job's
    options, whatever the order they come in."""
    kinds = [
        jobs.NewJob(payload=b"a", task="one"),
        jobs.NewJob(payload=b"b", task="two", priority=5, max_attempts=3),
        jobs.NewJob(payload=b"c", task="one", delay_ms=60_000),
        jobs.NewJob(payload=b"d", keep_result_ms=10, keep_dead_ms=20),
        jobs.NewJob(payload=b"e", group="g", group_concurrency=2),
    ]
    batch = [kinds[i % len(kinds)] for i in (0, 1, 0, 2, 3, 1, 4, 0, 4)]
    batch = [attrs.evolve(job, job_id=f"j{i}") for i, job in enumerate(batch)]
    sc = life.enqueue_call(queue, batch)
    assert sc.argv[2] == len(kinds)  # five distinct sets for nine jobs
    assert await evaluate(conn, sc) == [job.job_id for job in batch]
    for job in batch:
        info = await jobs.get_job(conn, queue, str(job.job_id))
        assert info is not None and info.payload == job.payload
        assert (info.priority, info.max_attempts, info.group) == (
            job.priority,
            job.max_attempts,
            job.group,
        )
        raw = await conn.execute("HGETALL", ks.job(str(job.job_id)))
        row = dict(zip(raw[::2], raw[1::2], strict=True))
        assert row.get(b"task") == (job.task.encode() if job.task else None)
        assert row.get(b"keep_result") == (b"10" if job.keep_result_ms else None)
        assert row.get(b"keep_dead") == (b"20" if job.keep_dead_ms else None)
        assert info.state is (
            echomq.JobState.SCHEDULED if job.delay_ms else echomq.JobState.PENDING
        )
    assert await conn.execute("HGET", ks.base + "gstate", "g:limit") == b"2"


async def test_option_sets_that_do_not_add_up_are_refused(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """The script refuses a set count of 0 or above n, and a job naming no set (EMQARG),
    writing nothing."""
    sc = life.enqueue_call(queue, [jobs.NewJob(payload=b"x"), jobs.NewJob(payload=b"y")])
    before = await snapshot(conn, ks)
    for m in (0, 3):
        bad = ScriptCall(sc.script, sc.keys, [*sc.argv[:2], m, *sc.argv[3:]], sc.read)
        with pytest.raises(InvalidArgument):
            await evaluate(conn, bad)
    # a job naming a set that is not there (0, or past m): refused, nothing written
    m = int(sc.argv[2])
    for number in ("0", str(m + 1), "x"):
        argv = list(sc.argv)
        argv[-1] = number  # the last job's option set
        with pytest.raises(InvalidArgument, match="names no option set"):
            await evaluate(conn, ScriptCall(sc.script, sc.keys, argv, sc.read))
    assert await snapshot(conn, ks) == before


def _every_option() -> jobs.NewJob:
    return jobs.NewJob(
        payload=b"p", delay_ms=11, priority=12, max_attempts=13, task="t.x", keep_result_ms=14,
        keep_dead_ms=15, dedup="k", dedup_ms=16, dedup_mode="debounce", group="g",
        group_concurrency=17, headers="tr", expires_ms=18,
    )  # fmt: skip


SENT = {
    "delay_ms": 11, "priority": 12, "max_attempts": 13, "task": "t.x", "keep_result": 14,
    "keep_dead": 15, "dedup": "k", "dedup_ms": 16, "dedup_mode": "d", "group": "g",
    "group_concurrency": 17, "headers": "tr", "expires": "18",
}  # fmt: skip


def test_an_option_set_is_sent_in_the_order_enqueue_lua_declares(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The argv's option set holds each field where enqueue.lua's SET_FIELDS puts it; had
    the Lua another order, the set would follow it (the reorder Python builds at import)."""
    from operator import itemgetter

    from echomq._scripts.loader import ENQUEUE_SET_FIELDS

    argv = life.enqueue_call("q", [_every_option()]).argv
    assert list(argv[3 : 3 + len(ENQUEUE_SET_FIELDS)]) == [SENT[f] for f in ENQUEUE_SET_FIELDS]
    assert set(SENT) == set(ENQUEUE_SET_FIELDS)
    reversed_fields = ENQUEUE_SET_FIELDS[::-1]
    reorder = itemgetter(*map(life._SET_BUILT.index, reversed_fields))
    monkeypatch.setattr(life, "_SET_SENT", reorder)
    argv = life.enqueue_call("q", [_every_option()]).argv
    assert list(argv[3 : 3 + len(reversed_fields)]) == [SENT[f] for f in reversed_fields]


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"priority": 3, "delay_ms": 5000, "max_attempts": 4, "task": "t"},
        {"dedup": "k", "dedup_ms": 1000, "dedup_mode": "debounce", "group": "g"},
    ],
)
def test_a_lone_job_is_sent_as_in_a_batch(fields: dict[str, object]) -> None:
    """enqueue_gated_call's path for one job (a lone delay()) sends the argv that
    _enqueue_argv makes for a batch of that one job, and reads the replies alike."""
    gated = life.gate_job(life.NewJob(payload=b"p", **fields))  # type: ignore[arg-type]
    lone = life.enqueue_gated_call("q", [gated])
    argv, ids = life._enqueue_argv(Keyspace("q").base, [gated])
    assert list(lone.argv) == argv and ids == [gated.id]
    assert lone.script.name == "enqueue"
    assert lone.read(1) == [None]
    assert lone.read([1]) == [None]
    (held,) = lone.read([b"holder"])
    assert held is not None and (held.id, held.deduplicated) == ("holder", True)
    with pytest.raises(echomq.errors.ScriptError):
        lone.read([1, 1])
