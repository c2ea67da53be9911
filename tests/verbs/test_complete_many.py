"""complete_many: the worker's batched settle. Each job fenced by its own token and checked
in complete's order, answered one by one; a refused job changes nothing while the others
complete; the completed ones finish exactly as complete finishes a job."""

from __future__ import annotations

from typing import Any

import pytest

import echomq
from _waits import _at, clock_past
from echomq import admin, jobs
from echomq._scripts.calls import is_sharded
from echomq._scripts.keyspace import Keyspace
from echomq.errors import InvalidArgument, ScriptError, ServerError
from echomq.jobs.lifecycle import complete_many_call

from ._support import claim_one, snapshot
from .test_settle import _refusals

OK, GONE, STALE, NOT_ACTIVE = (
    jobs.CompleteResult(x) for x in ("ok", "gone", "stale", "not_active")
)


def _entry(fields: list[bytes]) -> dict[str, bytes]:
    it = iter(fields)
    return {k.decode(): v for k, v in zip(it, it, strict=True)}


async def _stream(conn: echomq.Connection, ks: Keyspace) -> dict[str, dict[str, bytes]]:
    """The completions stream: job id -> its entry's fields."""
    entries = await conn.execute("XRANGE", ks.completions, "-", "+")
    return {e["id"].decode(): e for e in (_entry(fields) for _, fields in entries)}


def _shape(row: dict[str, Any]) -> dict[str, Any]:
    """What complete and complete_many must write alike (times differ)."""
    return {
        k: v for k, v in row.items() if k not in ("id", "created_at", "claimed_at", "finished_at")
    }


async def test_complete_many_finishes_each_job_as_complete_does(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """Row, indexes, counters and the completions entry: the same as one complete each,
    a `cancelled:<reason>` result finishing as cancelled."""
    ids = await jobs.enqueue_many(conn, queue, [jobs.NewJob(payload=b"x") for _ in range(6)])
    held = {c.id: c for c in await jobs.claim(conn, queue, 60_000, count=6)}
    results = [b"r1", b"cancelled:why", b"r3"]
    alone, batched = ids[:3], ids[3:]
    for job_id, result in zip(alone, results, strict=True):
        await jobs.complete(conn, queue, job_id, held[job_id].token, result)
    answers = await jobs.complete_many(
        conn,
        queue,
        [(j, held[j].token, r) for j, r in zip(batched, results, strict=True)],
    )
    assert answers == dict.fromkeys(batched, OK)
    assert list(answers) == batched  # in the order given
    stream = await _stream(conn, ks)
    assert stream[batched[1]]["state"] == b"cancelled"
    assert stream[batched[1]]["reason"] == b"why"
    for one, many in zip(alone, batched, strict=True):
        assert _shape(stream[many]) == _shape(stream[one])
        row_one = await jobs.get_job(conn, queue, one)
        row_many = await jobs.get_job(conn, queue, many)
        assert row_one is not None and row_many is not None
        assert row_many.state is row_one.state
        assert (row_many.result, row_many.cancel_reason) == (row_one.result, row_one.cancel_reason)
        index = ks.cancelled if row_many.cancelled else ks.completed
        ends = float(await conn.execute("ZSCORE", index, many))
        assert ends == row_many.finished_at + 86_400_000  # type: ignore[operator]
        assert await conn.execute("PTTL", ks.job(many)) > 0
    assert [(await jobs.get_job(conn, queue, j)).state for j in batched] == [  # type: ignore[union-attr]
        "completed", "cancelled", "completed",
    ]  # fmt: skip
    assert await conn.execute("ZCARD", ks.active) == 0
    assert await conn.execute("HGET", ks.metrics_completed, "count") == b"4"
    assert await conn.execute("HGET", ks.metrics_cancelled, "count") == b"2"


async def test_complete_many_retention_per_job_in_one_call(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """One call's jobs each get their own retention (the index entries are written once per
    call): the queue's, their own keep_result, 0 (row and logs deleted at once); the logs of
    the jobs that have some expire with their row, and no logs key appears for the others."""
    keeps = [None, 5_000, 0, None]
    ids = await jobs.enqueue_many(
        conn, queue, [jobs.NewJob(payload=b"x", keep_result_ms=k) for k in keeps]
    )
    held = {c.id: c for c in await jobs.claim(conn, queue, 60_000, count=4)}
    for with_logs in (ids[1], ids[2]):
        await jobs.add_log(conn, queue, with_logs, "line")
    answers = await jobs.complete_many(conn, queue, [(j, held[j].token, b"r") for j in ids])
    assert answers == dict.fromkeys(ids, OK)
    for job_id, keep in zip(ids, keeps, strict=True):
        if keep == 0:
            assert await conn.execute("EXISTS", ks.job(job_id), ks.logs(job_id)) == 0
            assert await conn.execute("ZSCORE", ks.completed, job_id) is None
            continue
        row = await jobs.get_job(conn, queue, job_id)
        assert row is not None and row.finished_at is not None
        ends = float(await conn.execute("ZSCORE", ks.completed, job_id))
        assert ends == row.finished_at + (keep or 86_400_000)
        assert 0 < await conn.execute("PTTL", ks.job(job_id)) <= (keep or 86_400_000)
    assert 0 < await conn.execute("PTTL", ks.logs(ids[1])) <= 5_000
    assert await conn.execute("EXISTS", ks.logs(ids[0]), ks.logs(ids[3])) == 0
    assert await conn.execute("ZCARD", ks.completed) == 3


async def test_complete_many_refused_jobs_change_nothing_and_the_rest_complete(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A gone id, a stale holder and a collected lease are each answered and change
    nothing; the held job in the same call completes."""
    refused = await _refusals(conn, queue, ks)
    triples = [(job_id, token, b"late") for job_id, token, _ in refused.values()]  # type: ignore[misc]
    before = await snapshot(conn, ks)
    answers = await jobs.complete_many(conn, queue, triples)
    assert await snapshot(conn, ks) == before  # nothing written for refused jobs alone
    assert list(answers.values()) == [GONE, STALE, NOT_ACTIVE]
    good_id = await jobs.enqueue(conn, queue, b"x")
    # the stale holder's job is active under its newer holder; the reaped one is pending
    good = await claim_one(conn, queue)
    while good.id != good_id:
        good = await claim_one(conn, queue)
    answers = await jobs.complete_many(conn, queue, [*triples, (good_id, good.token, b"ok")])
    assert answers[good_id] is OK
    stale_id = triples[1][0]
    assert list(answers.values())[:3] == [GONE, STALE, answers[triples[2][0]]]
    stale_row = await jobs.get_job(conn, queue, stale_id)
    assert stale_row is not None and stale_row.state is echomq.JobState.ACTIVE  # its holder's
    assert (await jobs.get_job(conn, queue, good_id)).state is echomq.JobState.COMPLETED  # type: ignore[union-attr]
    assert set(await _stream(conn, ks)) == {good_id}


async def test_complete_many_again_with_the_same_tokens_is_ok_and_changes_nothing(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """The worker retries a batch whose reply was lost: every job answers ok, nothing moves."""
    await jobs.enqueue_many(conn, queue, [jobs.NewJob(payload=b"x") for _ in range(3)])
    held = await jobs.claim(conn, queue, 60_000, count=3)
    triples = [(c.id, c.token, b"first") for c in held]
    assert set((await jobs.complete_many(conn, queue, triples)).values()) == {OK}
    before = await snapshot(conn, ks)
    again = [(c.id, c.token, b"second") for c in held]
    assert set((await jobs.complete_many(conn, queue, again)).values()) == {OK}
    assert await snapshot(conn, ks) == before


async def test_the_script_refuses_a_bad_call_before_writing(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """Past the verb's gate: a repeated id or a count that does not match is EMQARG, and
    nothing is written."""
    job_id = await jobs.enqueue(conn, queue, b"x")
    held = await claim_one(conn, queue)
    call = complete_many_call(queue, [(job_id, held.token, b"r")])
    source = call.script.variant(is_sharded(conn)).source
    before = await snapshot(conn, ks)
    for argv in (
        [ks.base, 2, job_id, str(held.token), b"r", job_id, str(held.token), b"r"],  # repeats
        [ks.base, 2, job_id, str(held.token), b"r"],  # count and arguments disagree
        [ks.base, 101, *[job_id, str(held.token), b"r"] * 101],  # over the cap
    ):
        with pytest.raises(Exception, match="EMQARG") as refused:
            await conn.execute("EVAL", source, 1, ks.active, *argv)
        assert isinstance(refused.value, InvalidArgument | ServerError)
    assert await snapshot(conn, ks) == before


def test_the_reply_reader_maps_each_code_and_refuses_anything_else() -> None:
    """One answer per job from its code (2, already completed, reads as ok); a reply of
    another shape or an unknown code is a ScriptError, never a wrong answer."""
    call = complete_many_call("q", [("a", 1, b""), ("b", 1, b""), ("c", 1, b""), ("d", 1, b"")])
    assert call.read([1, 2, -2, -3]) == {"a": OK, "b": OK, "c": STALE, "d": NOT_ACTIVE}
    assert call.read([-1, 1, 1, 1])["a"] is GONE
    for bad in ([1, 1, 1, 7], [1, 1, 1, b"1"], [1, 1, 1, [1]], [1, 1, 1, None], [1, 1], "OK"):
        with pytest.raises(ScriptError, match="unexpected reply"):
            call.read(bad)


async def test_entries_keep_the_contracts_field_order(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """docs/results.md's fields in its order, `id` first, whichever script writes them: a
    batch's entries (every field known) and a cancelled waiting job's (no task, never
    claimed: those fields left out, the rest in order)."""
    ids = await jobs.enqueue_many(
        conn, queue, [jobs.NewJob(payload=b"x", task="t.one"), jobs.NewJob(payload=b"x")]
    )
    held = {c.id: c for c in await jobs.claim(conn, queue, 60_000, count=2)}
    waiting = await jobs.enqueue(conn, queue, b"x")
    await jobs.complete_many(conn, queue, [(ids[0], held[ids[0]].token, b"r")])
    await jobs.complete_many(conn, queue, [(ids[1], held[ids[1]].token, b"cancelled:no")])
    await echomq.cancel.request(conn, queue, waiting, "gone")
    raw = await conn.execute("XRANGE", ks.completions, "-", "+")
    names = [[k.decode() for k in fields[::2]] for _, fields in raw]
    times = ["created_at", "claimed_at", "finished_at"]
    assert names == [
        ["id", "state", "token", "task", "result", "failures", *times],
        ["id", "state", "token", "reason", "failures", *times],
        ["id", "state", "token", "reason", "failures", "created_at", "finished_at"],
    ]
    assert [fields[1].decode() for _, fields in raw] == [*ids, waiting]


async def test_a_batch_trims_the_stream_by_time_once(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """completions_keep (MINID ~) applies to a batch as to one complete: the entries older
    than it go, whole nodes of 10 (the call's first entry trims; its own entries stay)."""
    before = (await _at(conn, ks.meta, "CONFIG", "GET", "stream-node-max-entries"))[1]
    await _at(conn, ks.meta, "CONFIG", "SET", "stream-node-max-entries", 10)
    try:
        ids = await jobs.enqueue_many(conn, queue, [jobs.NewJob(payload=b"") for _ in range(30)])
        held = {c.id: c for c in await jobs.claim(conn, queue, 60_000, count=30)}
        old, new = ids[:25], ids[25:]
        for job_id in old:
            await jobs.complete_many(conn, queue, [(job_id, held[job_id].token, b"")])
        last = (await conn.execute("XREVRANGE", ks.completions, "+", "-", "COUNT", 1))[0][0]
        await clock_past(conn, int(last.split(b"-")[0]) + 5, ks.meta)
        await admin.set_retention(conn, queue, completions_keep=0.001)
        answers = await jobs.complete_many(conn, queue, [(j, held[j].token, b"") for j in new])
    finally:
        await _at(conn, ks.meta, "CONFIG", "SET", "stream-node-max-entries", before)
    assert set(answers.values()) == {OK}
    kept = set(await _stream(conn, ks))
    assert set(new) <= kept and len(kept) <= 10
    assert (await admin.stats(conn, queue)).capped.completions == 0
