"""Cancel with a grace, at the verbs: the deadline, the fence, and bad input.

The fence settles a job cancelled and bumps its token: the attempt that did not stop can
no longer complete, fail or extend it (``StaleToken``). ``fence_due`` fences what is due
(every worker's heartbeat runs it); ``grace=0`` fences at once.
"""

from __future__ import annotations

import math

import pytest
import trio

import echomq
from _waits import clock_past
from echomq import cancel, jobs
from echomq._model.completion import FinishedJob, FinishState, parse_entry
from echomq._scripts.calls import ScriptCall, evaluate
from echomq._scripts.keyspace import Keyspace
from echomq._scripts.validate import MAX_BATCH
from echomq.errors import InvalidArgument, JobGone, NotCancellable, StaleToken
from verbs._support import snapshot

LEASE = 60_000


async def _held(conn: echomq.Connection, queue: str, job_id: str) -> echomq.Claimed:
    await jobs.enqueue(conn, queue, b"x", job_id=job_id, max_attempts=3)
    [held] = await jobs.claim(conn, queue, LEASE)
    assert held.id == job_id
    return held


async def entries(conn: echomq.Connection, ks: Keyspace) -> list[FinishedJob]:
    raw = await conn.execute("XRANGE", ks.completions, "-", "+")
    return [parse_entry(ks.queue, item[0].decode(), item[1]) for item in raw]


async def test_bad_grace_is_refused_before_any_io(closed_port_url: str, queue: str) -> None:
    """grace < 0, NaN, inf, not a number: InvalidArgument, nothing sent (no server here)."""
    async with echomq.connect(closed_port_url) as conn:
        for grace in (-0.001, -1, math.nan, math.inf, "1", True):
            with pytest.raises(InvalidArgument):
                await cancel.request(conn, queue, "j", grace=grace)  # type: ignore[arg-type]


async def test_cancel_of_a_finished_or_unknown_job_with_a_grace_writes_nothing(
    conn: echomq.Connection, queue: str
) -> None:
    """NotCancellable (completed, dead) and JobGone (no row): the keyspace is unchanged."""
    ks = Keyspace(queue)
    done = await _held(conn, queue, "done")
    await jobs.complete(conn, queue, "done", done.token, b"r")
    dead = await _held(conn, queue, "dead")
    await jobs.fail(conn, queue, "dead", dead.token, "boom", dead=True)
    before = await snapshot(conn, ks)
    for job_id, error in (("done", NotCancellable), ("dead", NotCancellable), ("nope", JobGone)):
        for grace in (0, 5):
            with pytest.raises(error):
                await cancel.request(conn, queue, job_id, "no", grace=grace)
    assert await snapshot(conn, ks) == before


async def test_grace_zero_fences_the_attempt_at_once(conn: echomq.Connection, queue: str) -> None:
    """`fenced`: completed as cancelled, the token bumped; the holder's complete, fail and
    extend are refused as stale; result() raises JobCancelled with the reason."""
    ks = Keyspace(queue)
    held = await _held(conn, queue, "a")
    assert await cancel.request(conn, queue, "a", "now", grace=0) == "fenced"
    info = await jobs.get_job(conn, queue, "a")
    assert info is not None and info.state is echomq.JobState.CANCELLED
    assert info.cancelled and (info.cancel_reason, info.result) == ("now", None)
    assert info.token == held.token + 1 and info.cancel_fenced_at is not None
    assert await conn.execute("ZSCORE", ks.active, "a") is None
    assert await conn.execute("ZSCORE", ks.cancelled, "a") is not None
    assert await conn.execute("ZCARD", ks.cancels) == 0
    with pytest.raises(StaleToken):
        await jobs.complete(conn, queue, "a", held.token, b"late")
    with pytest.raises(StaleToken):
        await jobs.fail(conn, queue, "a", held.token, "late")
    with pytest.raises(StaleToken):
        await jobs.extend_lock(conn, queue, "a", held.token, LEASE)
    assert (await jobs.get_job(conn, queue, "a")).cancel_reason == "now"  # type: ignore[union-attr]
    stats = await echomq.admin.stats(conn, queue)
    assert (stats.completed_total, stats.cancelled_total) == (0, 1)
    # it finished through `finished`: its completions entry, and the row's retention
    [entry] = await entries(conn, ks)
    assert (entry.id, entry.state, entry.reason) == ("a", FinishState.CANCELLED, "now")
    assert entry.token == held.token  # the claims it had (its token is one more)
    assert 0 < await conn.execute("PTTL", ks.job("a")) <= 86_400_000
    assert float(await conn.execute("ZSCORE", ks.cancelled, "a")) > entry.finished_at


async def test_a_grace_signals_then_fence_due_fences_only_what_is_due(
    conn: echomq.Connection, queue: str
) -> None:
    """The deadline is on the row and in `cancels`; before it, fence_due does nothing; after
    it, the job is fenced, and a job that finished by itself only leaves `cancels`."""
    ks = Keyspace(queue)
    slow = await _held(conn, queue, "slow")
    quick = await _held(conn, queue, "quick")
    assert await cancel.request(conn, queue, "slow", "stop", grace=0.2) == "signalled"
    assert await cancel.request(conn, queue, "quick", grace=0.2) == "signalled"
    info = await jobs.get_job(conn, queue, "slow")
    assert info is not None and info.cancel_deadline is not None
    assert info.state is echomq.JobState.ACTIVE and info.token == slow.token
    assert await cancel.fence_due(conn, queue) == []
    await jobs.complete(conn, queue, "quick", quick.token, b"cancelled:")  # it stopped in time
    await clock_past(conn, info.cancel_deadline, ks.meta)
    assert await cancel.fence_due(conn, queue) == ["slow"]
    assert await conn.execute("ZCARD", ks.cancels) == 0
    quick_info = await jobs.get_job(conn, queue, "quick")
    assert quick_info is not None and quick_info.token == quick.token  # not fenced
    with pytest.raises(StaleToken):
        await jobs.complete(conn, queue, "slow", slow.token, b"late")
    assert await cancel.fence_due(conn, queue) == []


async def test_a_repeat_moves_the_deadline_sooner_never_later(
    conn: echomq.Connection, queue: str
) -> None:
    """The first reason stands; a longer grace keeps the deadline; grace 0 fences now."""
    await _held(conn, queue, "a")
    assert await cancel.request(conn, queue, "a", "first", grace=60) == "signalled"
    first = (await jobs.get_job(conn, queue, "a")).cancel_deadline  # type: ignore[union-attr]
    assert await cancel.request(conn, queue, "a", "second", grace=600) == "signalled"
    assert (await jobs.get_job(conn, queue, "a")).cancel_deadline == first  # type: ignore[union-attr]
    assert await cancel.request(conn, queue, "a", "third", grace=0) == "fenced"
    assert (await jobs.get_job(conn, queue, "a")).cancel_reason == "first"  # type: ignore[union-attr]


async def test_a_flagged_job_back_in_pending_or_scheduled_is_fenced_at_its_deadline(
    conn: echomq.Connection, queue: str
) -> None:
    """A job handed back (released) or retried after its cancel keeps its deadline; the
    fence settles it cancelled from there: it does not run again."""
    ks = Keyspace(queue)
    back = await _held(conn, queue, "back")
    later = await _held(conn, queue, "later")
    for job_id in ("back", "later"):
        assert await cancel.request(conn, queue, job_id, grace=0.05) == "signalled"
    await jobs.release(conn, queue, [(back.id, back.token)])
    await jobs.fail(conn, queue, "later", later.token, "e", retry_delay_ms=60_000)
    deadline = float(await conn.execute("ZSCORE", ks.cancels, "later"))
    await clock_past(conn, deadline, ks.meta)
    assert sorted(await cancel.fence_due(conn, queue)) == ["back", "later"]
    for job_id in ("back", "later"):
        info = await jobs.get_job(conn, queue, job_id)
        assert info is not None and info.cancelled
    # one call fenced both: one entry each, counted once per call
    assert sorted((e.id, e.state) for e in await entries(conn, ks)) == [
        ("back", FinishState.CANCELLED), ("later", FinishState.CANCELLED)
    ]  # fmt: skip
    assert (await echomq.admin.stats(conn, queue)).cancelled_total == 2
    assert await conn.execute("ZCARD", ks.pending) == 0
    assert await conn.execute("ZCARD", ks.schedule) == 0


async def test_fence_events_tell_the_holder_to_stop_hard(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """A fence publishes `cancel` with fenced=true (the holder stops the job hard) and
    `completed` with fenced=true (result() wakes up)."""
    await _held(conn, queue, "a")
    q = echomq.Queue(queue, url=redis_url)
    async with q.open():
        feed = await q.event_feed()
        with feed.listen(job="a", events=("cancel", "cancelled"), buffer=8) as heard:
            assert await cancel.request(conn, queue, "a", "go", grace=0) == "fenced"
            with trio.fail_after(5):
                first, second = await heard.receive(), await heard.receive()
    assert (first.event, first.fields.get("fenced"), first.fields.get("reason")) == (
        "cancel",
        True,
        "go",
    )
    assert (second.event, second.fields.get("fenced")) == ("cancelled", True)


async def test_reprocess_clears_a_cancel_left_on_a_dead_job(
    conn: echomq.Connection, queue: str
) -> None:
    """A job that died with a pending cancel runs afresh when reprocessed: no fence later."""
    ks = Keyspace(queue)
    held = await _held(conn, queue, "a")
    assert await cancel.request(conn, queue, "a", grace=0.05) == "signalled"
    await jobs.fail(conn, queue, "a", held.token, "boom", dead=True)
    await jobs.reprocess_job(conn, queue, "a")
    info = await jobs.get_job(conn, queue, "a")
    assert info is not None and info.cancel_deadline is None and info.cancel_requested_at is None
    deadline = float(await conn.execute("ZSCORE", ks.cancels, "a"))
    await clock_past(conn, deadline, ks.meta)
    assert await cancel.fence_due(conn, queue) == []
    assert await conn.execute("ZCARD", ks.cancels) == 0
    assert (await jobs.get_job(conn, queue, "a")).state is echomq.JobState.PENDING  # type: ignore[union-attr]


async def test_fence_due_limit_is_gated(closed_port_url: str, queue: str) -> None:
    async with echomq.connect(closed_port_url) as conn:
        for limit in (0, MAX_BATCH + 1, 1.5):
            with pytest.raises(InvalidArgument):
                await cancel.fence_due(conn, queue, limit=limit)  # type: ignore[arg-type]


async def test_fence_cancels_fences_its_cap_in_one_call_and_refuses_more(
    conn: echomq.Connection, queue: str
) -> None:
    """MAX_BATCH due cancels (each finishes a job: its entry, its retention) in one call;
    a limit over the cap, sent past the verb's gate, is refused by the script itself."""
    ks = Keyspace(queue)
    ids = await jobs.enqueue_many(conn, queue, [jobs.NewJob(payload=b"x")] * (MAX_BATCH + 1))
    held = await jobs.claim(conn, queue, LEASE, count=MAX_BATCH + 1)
    for c in held:
        assert await cancel.request(conn, queue, c.id, grace=0.001) == "signalled"
    deadline = float(await conn.execute("ZSCORE", ks.cancels, held[-1].id))
    await clock_past(conn, deadline, ks.meta)
    sc = cancel.fence_due_call(queue, 1)
    before = await snapshot(conn, ks)
    with pytest.raises(InvalidArgument):
        await evaluate(conn, ScriptCall(sc.script, sc.keys, [ks.base, MAX_BATCH + 1], sc.read))
    assert await snapshot(conn, ks) == before
    first = await cancel.fence_due(conn, queue, limit=MAX_BATCH)
    assert len(first) == MAX_BATCH
    assert sorted(first + await cancel.fence_due(conn, queue)) == sorted(ids)
    assert len(await entries(conn, ks)) == MAX_BATCH + 1
    assert (await echomq.admin.stats(conn, queue)).cancelled_total == MAX_BATCH + 1
