"""Group lanes (docs/lanes.md): fair turns between groups, per-group concurrency, and how
every lifecycle verb places, takes and gives back a grouped job. Each test ends by
checking the lanes' invariants (``_lanes.check_lanes``)."""

from __future__ import annotations

import pytest

import echomq
from _waits import clock_past
from echomq import admin, jobs
from echomq._scripts.keyspace import Keyspace

from ._lanes import check_lanes, lanes_of, ring_of
from ._support import lapse, server_now_ms


async def put(
    conn: echomq.Connection, queue: str, group: str | None, n: int, **kw: int
) -> list[str]:
    batch = [jobs.NewJob(payload=f"{group}-{i}", group=group, **kw) for i in range(n)]
    return await jobs.enqueue_many(conn, queue, batch)


def groups_of(claimed: list[echomq.Claimed]) -> list[str]:
    return [c.payload.decode().rsplit("-", 1)[0] for c in claimed]


async def test_a_grouped_job_waits_in_its_lane(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """The row names its group; the job is in the lane, not in pending; the group has a
    turn; one wake token."""
    (job_id,) = await put(conn, queue, "acme", 1)
    info = await jobs.get_job(conn, queue, job_id)
    assert info is not None and info.group == "acme" and info.state == "pending"
    assert await conn.execute("ZCARD", ks.pending) == 0
    assert await lanes_of(conn, ks) == {"acme": [job_id]}
    assert await ring_of(conn, ks) == ["acme"]
    assert await conn.execute("LLEN", ks.wake) == 1
    stats = await admin.stats(conn, queue)
    assert (stats.pending, stats.grouped, stats.groups) == (1, 1, 1)
    await check_lanes(conn, queue)


async def test_groups_take_turns_one_job_each(conn: echomq.Connection, queue: str) -> None:
    """A big group cannot starve a small one: the turns alternate, in one call and across
    calls."""
    await put(conn, queue, "big", 20)
    await put(conn, queue, "small", 3)
    first = await jobs.claim(conn, queue, 10_000, count=4)
    assert groups_of(first) == ["big", "small", "big", "small"]
    singles = [groups_of(await jobs.claim(conn, queue, 10_000))[0] for _ in range(4)]
    assert singles == ["big", "small", "big", "big"]
    await check_lanes(conn, queue)


async def test_the_ring_back_is_gstate_turn_and_a_ring_from_before_it_keeps_its_order(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """The ring's last turn is kept in gstate (``:turn``): a member goes behind it, whether
    the claim or a joining group places it. A ring from before the field (scores beyond
    it, no field) is read for its back once, and keeps its order."""
    for group in ("a", "b", "c"):
        await put(conn, queue, group, 3)
    assert await ring_of(conn, ks) == ["a", "b", "c"]
    assert await conn.execute("HGET", ks.gstate, ":turn") == b"3"
    await conn.execute("HDEL", ks.gstate, ":turn")  # as a queue written before the field
    await conn.execute("ZADD", ks.ring, 10, "a", 20, "b", 30, "c")
    assert groups_of(await jobs.claim(conn, queue, 10_000)) == ["a"]
    assert await conn.execute("ZSCORE", ks.ring, "a") == b"31"
    await put(conn, queue, "d", 1)  # joins behind a
    assert await ring_of(conn, ks) == ["b", "c", "a", "d"]
    assert await conn.execute("HGET", ks.gstate, ":turn") == b"32"
    turns = [groups_of(await jobs.claim(conn, queue, 10_000))[0] for _ in range(6)]
    assert turns == ["b", "c", "a", "d", "b", "c"]
    await check_lanes(conn, queue)


async def test_ungrouped_jobs_take_turns_as_one_member(conn: echomq.Connection, queue: str) -> None:
    """Ungrouped jobs share the ring as one member beside the groups."""
    await put(conn, queue, "a", 3)
    await put(conn, queue, None, 3)
    claimed = await jobs.claim(conn, queue, 10_000, count=6)
    assert groups_of(claimed) == ["a", "None", "a", "None", "a", "None"]
    await check_lanes(conn, queue)


async def test_priorities_order_a_lane(conn: echomq.Connection, queue: str) -> None:
    """Higher priority first inside a lane, FIFO within a priority."""
    ids = [await jobs.enqueue(conn, queue, b"", group="g", priority=p) for p in (0, 5, 1, 5)]
    claimed = await jobs.claim(conn, queue, 10_000, count=4)
    assert [c.id for c in claimed] == [ids[1], ids[3], ids[2], ids[0]]
    await check_lanes(conn, queue)


async def test_a_delayed_grouped_job_is_promoted_into_its_lane(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A delayed grouped job waits in the schedule set; the claim after it is due moves it
    to its lane (and wakes a consumer); the next claim takes it."""
    job_id = await jobs.enqueue(conn, queue, b"", group="g", delay_ms=1)
    assert await conn.execute("ZSCORE", ks.schedule, job_id) is not None
    due = await conn.execute("ZSCORE", ks.schedule, job_id)
    while await server_now_ms(conn) <= float(due):
        pass
    assert await jobs.claim(conn, queue, 10_000) == []
    assert await lanes_of(conn, ks) == {"g": [job_id]}
    assert await conn.execute("LLEN", ks.wake) >= 1
    (claimed,) = await jobs.claim(conn, queue, 10_000)
    assert claimed.id == job_id
    await check_lanes(conn, queue)


async def test_group_concurrency_limits_and_complete_gives_the_slot_back(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """At its limit a group leaves the ring; a completion gives the slot back and the group
    rejoins with a wake token."""
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_group_concurrency(conn, queue, 2, group="a")
    await put(conn, queue, "a", 5)
    await put(conn, queue, "b", 5)
    claimed = await jobs.claim(conn, queue, 10_000, count=8)
    assert groups_of(claimed).count("a") == 2
    assert await ring_of(conn, ks) == []
    held_a = [c for c in claimed if groups_of([c]) == ["a"]]
    await conn.execute("DEL", ks.wake)
    await jobs.complete(conn, queue, held_a[0].id, held_a[0].token)
    assert await ring_of(conn, ks) == ["a"]
    assert await conn.execute("LLEN", ks.wake) == 1
    again = await jobs.claim(conn, queue, 10_000, count=8)
    assert groups_of(again) == ["a"]
    await check_lanes(conn, queue)


async def test_the_default_limit_comes_from_meta_and_a_raise_reaches_waiting_groups(
    conn: echomq.Connection, queue: str
) -> None:
    """With no limit of its own a group takes the queue's default; raising the default
    lets the groups at the old one start more at once."""
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_group_concurrency(conn, queue, 1)
    await put(conn, queue, "a", 3)
    await put(conn, queue, "b", 3)
    assert groups_of(await jobs.claim(conn, queue, 10_000, count=10)) == ["a", "b"]
    assert await jobs.claim(conn, queue, 10_000, count=10) == []
    await admin.set_group_concurrency(conn, queue, 2)
    assert groups_of(await jobs.claim(conn, queue, 10_000, count=10)) == ["a", "b"]
    assert (await admin.limits(conn, queue)).group_concurrency == 2
    await check_lanes(conn, queue)


async def test_a_limit_lowered_below_active_finishes_running_jobs_and_claims_none(
    conn: echomq.Connection, queue: str
) -> None:
    """Lowered under its active count, a group keeps its running jobs and starts none until
    it is under the limit again."""
    await put(conn, queue, "a", 6)
    held = await jobs.claim(conn, queue, 10_000, count=3)
    await admin.set_group_concurrency(conn, queue, 1, group="a")
    assert await jobs.claim(conn, queue, 10_000) == []
    await jobs.complete(conn, queue, held[0].id, held[0].token)
    await jobs.complete(conn, queue, held[1].id, held[1].token)
    assert await jobs.claim(conn, queue, 10_000) == []  # 1 active: at the limit
    await jobs.complete(conn, queue, held[2].id, held[2].token)
    assert len(await jobs.claim(conn, queue, 10_000, count=5)) == 1
    await check_lanes(conn, queue)


async def test_a_stale_ring_member_is_dropped_and_the_claim_asks_to_come_back(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A ring member that may not run (its default limit changed under it without the
    verb) is dropped by the claim; when more members wait unread, the claim answers 0 ms
    and a wake token, and the next claim goes on."""
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_group_concurrency(conn, queue, 5, group="d")
    for g in ("a", "b", "c", "d"):
        await put(conn, queue, g, 3)
    assert len(await jobs.claim(conn, queue, 10_000, count=4)) == 4
    await conn.execute("HSET", ks.meta, "group_concurrency", 1)  # a, b, c now full
    await conn.execute("DEL", ks.wake)
    batch = await jobs.claim_batch(conn, queue, 10_000, count=2)
    assert batch.jobs == [] and batch.next_due_ms == 0
    assert await conn.execute("LLEN", ks.wake) == 1
    batch = await jobs.claim_batch(conn, queue, 10_000, count=2)
    assert groups_of(batch.jobs) == ["d", "d"]
    await check_lanes(conn, queue)


async def test_a_claim_serves_at_most_100_groups_and_the_rest_go_next(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A claim reads at most 100 ring members (its bound): with 150 groups ready it takes
    one job from each of the first 100, answers 0 ms and pushes a wake token; the next claim
    starts with the 50 it did not reach, so every group has started within two claims."""
    names = [f"g{i:03d}" for i in range(150)]
    for k in (0, 1):  # two jobs per group
        batch = [jobs.NewJob(payload=f"{g}-{k}", group=g) for g in names]
        await jobs.enqueue_many(conn, queue, batch)
    await conn.execute("DEL", ks.wake)
    first = await jobs.claim_batch(conn, queue, 10_000, count=250)
    served = groups_of(first.jobs)
    assert len(served) == 100 and len(set(served)) == 100
    assert first.next_due_ms == 0
    assert await conn.execute("LLEN", ks.wake) == 1
    second = await jobs.claim_batch(conn, queue, 10_000, count=250)
    again = groups_of(second.jobs)
    assert len(again) == 100 and len(set(again)) == 100
    assert set(served) | set(again) == set(names)
    assert second.next_due_ms == 0
    third = await jobs.claim_batch(conn, queue, 10_000, count=250)  # 100 members: all read
    assert len(third.jobs) == 100 and third.next_due_ms is None
    assert await jobs.claim(conn, queue, 10_000, count=250) == []
    await check_lanes(conn, queue)


async def test_fail_retries_into_the_lane_and_gives_the_slot_back(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_group_concurrency(conn, queue, 1, group="a")
    await put(conn, queue, "a", 1, max_attempts=2)
    (held,) = await jobs.claim(conn, queue, 10_000)
    assert await jobs.fail(conn, queue, held.id, held.token, "boom") == "retrying"
    assert await lanes_of(conn, ks) == {"a": [held.id]}
    (again,) = await jobs.claim(conn, queue, 10_000)
    assert await jobs.fail(conn, queue, again.id, again.token, "boom") == "dead"
    assert await conn.execute("ZCARD", ks.groups) == 0
    await check_lanes(conn, queue)


async def test_a_retry_with_a_delay_goes_through_the_schedule_set(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    await put(conn, queue, "a", 1, max_attempts=2)
    (held,) = await jobs.claim(conn, queue, 10_000)
    await jobs.fail(conn, queue, held.id, held.token, "boom", retry_delay_ms=60_000)
    assert await conn.execute("ZSCORE", ks.schedule, held.id) is not None
    assert await lanes_of(conn, ks) == {}
    await check_lanes(conn, queue)


@pytest.mark.parametrize("sweep", ["reap", "reap_counted", "stalled"])
async def test_recovery_returns_a_grouped_job_to_its_lane(
    conn: echomq.Connection, queue: str, ks: Keyspace, sweep: str
) -> None:
    """An expired lease of a grouped job gives back the slot and the job goes back to the
    front of its lane."""
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_group_concurrency(conn, queue, 1, group="a")
    ids = await put(conn, queue, "a", 2)
    (held,) = await jobs.claim(conn, queue, 5)
    await lapse(conn, ks, held.id)
    if sweep == "reap":
        assert await jobs.reap(conn, queue) == [held.id]
    elif sweep == "reap_counted":
        assert (await jobs.reap_counted(conn, queue, max_recoveries=5)).recovered == [held.id]
    else:
        assert (await echomq.stalled.check(conn, queue, max_stalled=5)).recovered == [held.id]
    assert await lanes_of(conn, ks) == {"a": ids}
    assert await ring_of(conn, ks) == ["a"]
    await check_lanes(conn, queue)


async def test_a_stalled_grouped_job_dead_lettered_gives_the_slot_back(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_group_concurrency(conn, queue, 1, group="a")
    ids = await put(conn, queue, "a", 2)
    (held,) = await jobs.claim(conn, queue, 5)
    await lapse(conn, ks, held.id)
    assert (await echomq.stalled.check(conn, queue, max_stalled=1)).dead == [held.id]
    assert await lanes_of(conn, ks) == {"a": ids[1:]}
    assert await ring_of(conn, ks) == ["a"]
    await check_lanes(conn, queue)


async def test_release_hands_a_grouped_job_back_to_the_front_of_its_lane(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    ids = await put(conn, queue, "a", 3)
    (held,) = await jobs.claim(conn, queue, 10_000)
    assert held.id == ids[0]
    assert await jobs.release(conn, queue, [(held.id, held.token)]) == {held.id: "ok"}
    assert await lanes_of(conn, ks) == {"a": ids}
    await check_lanes(conn, queue)


async def test_extend_keeps_a_grouped_lease_and_its_slot(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    await put(conn, queue, "a", 1)
    (held,) = await jobs.claim(conn, queue, 10_000)
    await jobs.extend_lock(conn, queue, held.id, held.token, 20_000)
    assert await jobs.extend_locks(conn, queue, [(held.id, held.token)], 20_000) == {held.id: "ok"}
    assert await conn.execute("HGET", ks.gstate, "a") == b"1"
    await check_lanes(conn, queue)


@pytest.mark.parametrize("where", ["waiting", "active"])
async def test_remove_job_takes_a_grouped_job_out_of_its_lane_or_slot(
    conn: echomq.Connection, queue: str, ks: Keyspace, where: str
) -> None:
    """A waiting grouped job leaves its lane (an emptied lane leaves the ring and the
    registry); an active one gives back its group's slot."""
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_group_concurrency(conn, queue, 1, group="a")
    ids = await put(conn, queue, "a", 2)
    if where == "active":
        (held,) = await jobs.claim(conn, queue, 10_000)
        await jobs.remove_job(conn, queue, held.id)
        assert await ring_of(conn, ks) == ["a"]
        assert await lanes_of(conn, ks) == {"a": ids[1:]}
    else:
        for job_id in ids:
            await jobs.remove_job(conn, queue, job_id)
        assert await ring_of(conn, ks) == []
        assert await conn.execute("ZCARD", ks.groups) == 0
    await check_lanes(conn, queue)


async def test_cancel_removes_a_waiting_grouped_job_from_its_lane(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    (job_id,) = await put(conn, queue, "a", 1)
    assert await echomq.cancel.request(conn, queue, job_id) == "removed"
    assert await lanes_of(conn, ks) == {} and await ring_of(conn, ks) == []
    await check_lanes(conn, queue)


async def test_a_grouped_job_that_ends_gives_its_slot_back_and_finishes(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """Leaving active and finishing meet: a grouped job that completes, dies (fail, the
    stalled sweep) or is cancelled while waiting gives back its lane's slot or place
    (leave_active / leave_ready) and gets its completions entry (finished), in order."""
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_group_concurrency(conn, queue, 1, group="a")
    ids = await put(conn, queue, "a", 4)
    assert await echomq.cancel.request(conn, queue, ids[3]) == "removed"
    (one,) = await jobs.claim(conn, queue, 10_000)
    assert await jobs.claim(conn, queue, 10_000) == []  # at its limit
    await jobs.complete(conn, queue, one.id, one.token, b"ok")
    (two,) = await jobs.claim(conn, queue, 10_000)
    assert await jobs.fail(conn, queue, two.id, two.token, "boom") == "dead"
    (three,) = await jobs.claim(conn, queue, 5)
    await lapse(conn, ks, three.id)
    assert (await echomq.stalled.check(conn, queue, max_stalled=1)).dead == [three.id]
    entries = await conn.execute("XRANGE", ks.completions, "-", "+")
    ended = [(f[b"id"].decode(), f[b"state"].decode()) for f in (_pairs(e[1]) for e in entries)]
    assert ended == [
        (ids[3], "cancelled"), (one.id, "completed"), (two.id, "dead"), (three.id, "dead")
    ]  # fmt: skip
    assert await conn.execute("HGET", ks.gstate, "a") is None
    assert await conn.execute("ZCARD", ks.groups) == 0
    await check_lanes(conn, queue)


async def test_a_fenced_grouped_job_gives_its_slot_back_and_finishes(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """The cancel fence (include/fence.lua) goes through leave_active / leave_ready: a held
    grouped job fenced by cancel(grace=0), and one fenced by fence_due after its grace, each
    give back the group's slot (the next job of the group is claimable); a grouped job
    handed back to its lane before its fence leaves the lane. Each gets its entry."""
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_group_concurrency(conn, queue, 1, group="a")
    ids = await put(conn, queue, "a", 4)
    (one,) = await jobs.claim(conn, queue, 10_000)
    assert await jobs.claim(conn, queue, 10_000) == []  # at its limit
    assert await echomq.cancel.request(conn, queue, one.id, "now", grace=0) == "fenced"
    assert await conn.execute("HGET", ks.gstate, "a") is None
    await check_lanes(conn, queue)
    (two,) = await jobs.claim(conn, queue, 10_000)  # the slot came back
    assert two.id == ids[1]
    assert await echomq.cancel.request(conn, queue, two.id, "late", grace=0.05) == "signalled"
    assert await jobs.claim(conn, queue, 10_000) == []  # still held until its fence
    info = await jobs.get_job(conn, queue, two.id)
    assert info is not None and info.cancel_deadline is not None
    await clock_past(conn, info.cancel_deadline, ks.meta)
    assert await echomq.cancel.fence_due(conn, queue) == [two.id]
    await check_lanes(conn, queue)
    (three,) = await jobs.claim(conn, queue, 10_000)
    assert three.id == ids[2]
    assert await echomq.cancel.request(conn, queue, three.id, grace=0.05) == "signalled"
    assert await jobs.release(conn, queue, [(three.id, three.token)]) == {three.id: "ok"}
    assert await lanes_of(conn, ks) == {"a": [three.id, ids[3]]}  # waiting again, first
    info = await jobs.get_job(conn, queue, three.id)
    assert info is not None and info.cancel_deadline is not None
    await clock_past(conn, info.cancel_deadline, ks.meta)
    assert await echomq.cancel.fence_due(conn, queue) == [three.id]
    assert await lanes_of(conn, ks) == {"a": [ids[3]]}
    await check_lanes(conn, queue)
    (four,) = await jobs.claim(conn, queue, 10_000)
    assert four.id == ids[3]
    entries = await conn.execute("XRANGE", ks.completions, "-", "+")
    ended = [(f[b"id"].decode(), f[b"state"].decode()) for f in (_pairs(e[1]) for e in entries)]
    assert ended == [(one.id, "cancelled"), (two.id, "cancelled"), (three.id, "cancelled")]
    assert await conn.execute("HGET", ks.gstate, "a") == b"1"  # four holds the only slot
    await check_lanes(conn, queue)


async def test_complete_many_gives_the_grouped_slots_back(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """The worker's batched settle (complete_many) gives each grouped job's slot back
    (leave_active) and finishes every job; the ungrouped ones leave active together."""
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_group_concurrency(conn, queue, 1, group="a")
    await put(conn, queue, "a", 2)
    await put(conn, queue, "b", 1)
    await put(conn, queue, None, 1)
    held = await jobs.claim(conn, queue, 10_000, count=10)
    assert sorted(groups_of(held)) == ["None", "a", "b"]
    await conn.execute("DEL", ks.wake)
    done = [(c.id, c.token, b"ok") for c in held]
    assert set((await jobs.complete_many(conn, queue, done)).values()) == {"ok"}
    assert await conn.execute("ZCARD", ks.active) == 0
    assert await ring_of(conn, ks) == ["a"]  # back under its limit, with its last job
    assert await conn.execute("LLEN", ks.wake) == 1
    assert await conn.execute("XLEN", ks.completions) == 3
    (last,) = await jobs.claim(conn, queue, 10_000, count=10)
    assert groups_of([last]) == ["a"]
    await check_lanes(conn, queue)


async def test_a_grouped_job_under_a_held_dedup_key_is_not_placed(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """Dedup (docs/repeat.md) and lanes meet in enqueue: the job that takes the key waits in
    its lane; a second one under the held key is answered with the holder and placed
    nowhere (no lane entry, no lane count)."""
    first = jobs.NewJob(payload=b"1", group="a", dedup="k", dedup_ms=60_000)
    second = jobs.NewJob(payload=b"2", group="a", dedup="k", dedup_ms=60_000)
    ids = await jobs.enqueue_many(conn, queue, [first, second])
    assert ids[0] == ids[1]
    assert await lanes_of(conn, ks) == {"a": [ids[0]]}
    await check_lanes(conn, queue)


def _pairs(flat: list[bytes]) -> dict[bytes, bytes]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


async def test_reprocess_returns_a_grouped_dead_job_to_its_lane(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    (job_id,) = await put(conn, queue, "a", 1)
    (held,) = await jobs.claim(conn, queue, 10_000)
    await jobs.fail(conn, queue, held.id, held.token, "boom", dead=True)
    await jobs.reprocess_job(conn, queue, job_id)
    assert await lanes_of(conn, ks) == {"a": [job_id]}
    assert await ring_of(conn, ks) == ["a"]
    await check_lanes(conn, queue)


async def test_drain_pages_through_the_lanes_and_spares_active_jobs(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A small budget drains the flat backlog and every lane over several steps; the
    groups with jobs in flight stay registered."""
    await put(conn, queue, None, 3)
    for g in ("a", "b", "c", "d"):
        await put(conn, queue, g, 4)
    held = await jobs.claim(conn, queue, 10_000, count=2)
    steps: list[tuple[int, int]] = []
    total = await admin.drain(
        conn, queue, budget=3, on_progress=lambda done, left: steps.append((done, left))
    )
    assert total == 3 + 16 - 2
    assert len(steps) >= 6 and steps[-1][1] == 0
    assert await lanes_of(conn, ks) == {} and await ring_of(conn, ks) == []
    assert await conn.execute("ZCARD", ks.active) == 2
    registry = {m.decode() for m in await conn.execute("ZRANGE", ks.groups, 0, -1)}
    assert registry == set(groups_of(held)) - {"None"}
    await check_lanes(conn, queue)


async def test_obliterate_deletes_the_lanes_a_budget_at_a_time(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    for g in ("a", "b", "c"):
        await put(conn, queue, g, 5)
    await admin.set_group_concurrency(conn, queue, 2, group="a")
    await admin.set_rate_limit(conn, queue, 5, 60, group="b")
    await jobs.claim(conn, queue, 10_000, count=4)
    await admin.pause(conn, queue)
    calls = 0
    while not await admin.obliterate(conn, queue, force=True, budget=3):
        calls += 1
        assert calls < 50
    assert calls >= 4
    assert await conn.execute("KEYS", ks.pattern) == []


async def test_explain_says_why_a_grouped_job_waits(conn: echomq.Connection, queue: str) -> None:
    """'waiting: group acme at its limit of 2 active' (cli/explain_text.py words it)."""
    from echomq.cli.explain_text import facts, summary

    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_group_concurrency(conn, queue, 2, group="acme")
    ids = await put(conn, queue, "acme", 3)
    e = await jobs.explain(conn, queue, ids[0])
    assert e.consistent and e.lane is not None and e.lane.position == 0
    assert summary(e).startswith("ready at position 1 of 3 in group acme's lane")
    await jobs.claim(conn, queue, 10_000, count=5)
    e = await jobs.explain(conn, queue, ids[2])
    assert e.consistent and e.lane is not None
    assert (e.lane.active, e.lane.limit, e.lane.in_ring) == (2, 2, False)
    assert summary(e) == (
        "waiting: group acme at its limit of 2 active; position 1 of 1 in group acme's lane"
    )
    assert ("group", "acme") in facts(e)


async def test_groups_view_lists_counts_and_standing(conn: echomq.Connection, queue: str) -> None:
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_group_concurrency(conn, queue, 1, group="b")
    await admin.set_rate_limit(conn, queue, 9, 2.0, every_group=True)
    await put(conn, queue, "a", 2)
    await put(conn, queue, "b", 3)
    await put(conn, queue, "c", 1)
    await jobs.claim(conn, queue, 10_000, count=3)
    rows = await admin.groups(conn, queue, limit=2)
    assert [r.name for r in rows] == ["a", "b"]
    b = rows[1]
    assert (b.waiting, b.active, b.limit, b.own_limit, b.at_limit, b.in_ring) == (
        2,
        1,
        1,
        True,
        True,
        False,
    )
    assert b.rate is not None and (b.rate.max_jobs, b.rate.period_ms, b.own_rate) == (
        9,
        2000,
        False,
    )
    (c,) = await admin.groups(conn, queue, after="b")  # c's one job is held
    assert (c.name, c.waiting, c.active) == ("c", 0, 1)
    assert (await admin.group(conn, queue, "zz")).waiting == 0
