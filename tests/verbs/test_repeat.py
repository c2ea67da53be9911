"""The repeat registry and the scheduler's pass (docs/repeat.md).

Each due slot is enqueued exactly once, however many schedulers race (a compare-and-set on
the record's next slot inside the enqueue script; the run's id is ``<key>~<slot>``).
"""

from __future__ import annotations

import datetime as dt
import itertools

import pytest
import trio

import echomq
from echomq import jobs, repeat
from echomq._scripts.keyspace import Keyspace
from echomq.errors import InvalidArgument, InvalidKey, RepeatFormatError, RepeatNotFound
from echomq.repeat import FireOutcome, fire_call

from ._support import eventually, server_now_ms, snapshot

EVERY_50MS = repeat.Schedule.of(every=0.05)


async def add(conn: echomq.Connection, queue: str, key: str = "tick", **kw: object) -> repeat.Added:
    options: dict[str, object] = {"task": "app.tick", "payload": b"{}", "schedule": EVERY_50MS}
    options.update(kw)
    return await repeat.add(conn, queue, key, **options)  # type: ignore[arg-type]


async def due(conn: echomq.Connection, at_ms: int) -> None:
    """Wait (bounded) until the server clock is at ``at_ms`` or later."""

    async def passed() -> bool:
        return await server_now_ms(conn) >= at_ms

    await eventually(passed)


async def test_add_registers_a_record_at_its_first_slot(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    before = await server_now_ms(conn)
    added = await add(conn, queue, "k1")
    assert added.created and added.rescheduled
    assert before + 50 <= added.next_ms <= await server_now_ms(conn) + 50
    assert float(await conn.execute("ZSCORE", ks.repeat, "k1")) == added.next_ms
    info = await repeat.get(conn, queue, "k1")
    assert (info.task, info.schedule, info.next_ms, info.paused) == (
        "app.tick",
        EVERY_50MS,
        added.next_ms,
        False,
    )
    assert (info.runs, info.missed, info.source) == (0, "once", "api")
    assert await conn.execute("HGET", ks.meta, "schema_version") is not None


async def test_the_same_schedule_keeps_its_slot_another_reschedules(
    conn: echomq.Connection, queue: str
) -> None:
    """Registering again (every worker does at start) changes nothing but the options."""
    first = await add(conn, queue, "k", schedule=repeat.Schedule.of(every=3600))
    again = await add(conn, queue, "k", schedule=repeat.Schedule.of(every=3600), priority=5)
    assert (again.created, again.rescheduled, again.next_ms) == (False, False, first.next_ms)
    assert (await repeat.get(conn, queue, "k")).priority == 5
    moved = await add(conn, queue, "k", schedule=repeat.Schedule.of(every=60))
    assert moved.rescheduled and moved.next_ms < first.next_ms


async def test_a_due_slot_is_enqueued_once_and_next_advances(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    added = await add(conn, queue, "k", payload=b'{"t": 1}', priority=3, max_attempts=2)
    await due(conn, added.next_ms)
    tick = await repeat.tick(conn, queue)
    assert tick.fired == [f"k~{added.next_ms}"]
    info = await jobs.get_job(conn, queue, tick.fired[0])
    assert info is not None and info.state is echomq.JobState.PENDING
    assert (info.payload, info.priority, info.max_attempts) == (b'{"t": 1}', 3, 2)
    assert info.repeat == "k"
    record = await repeat.get(conn, queue, "k")
    assert record.next_ms is not None and record.next_ms > tick.now_ms
    assert (record.runs, record.last_job, record.last_slot) == (1, tick.fired[0], added.next_ms)
    assert (await repeat.tick(conn, queue)).fired == []  # the same slot never fires again


async def test_a_run_names_its_task_and_finishes_through_the_completions_stream(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A run is an enqueue like any other: its row carries the task, so its completions
    entry does (docs/results.md)."""
    added = await add(conn, queue, "named", task="app.named")
    await due(conn, added.next_ms)
    (run,) = (await repeat.tick(conn, queue)).fired
    assert await conn.execute("HMGET", ks.job(run), "task", "repeat") == [b"app.named", b"named"]
    (held,) = await jobs.claim(conn, queue, 5_000)
    await jobs.complete(conn, queue, held.id, held.token, b"done")
    [(_, fields)] = await conn.execute("XRANGE", ks.completions, "-", "+")
    entry = dict(zip(fields[::2], fields[1::2], strict=True))
    assert (entry[b"id"], entry[b"state"], entry[b"task"]) == (
        run.encode(), b"completed", b"app.named",
    )  # fmt: skip


async def test_racing_schedulers_enqueue_each_slot_exactly_once(
    redis_url: str, queue: str, ks: Keyspace
) -> None:
    """8 schedulers tick as fast as they can over ~12 slots: one job per slot fired, and
    every slot accounted for (fired, or coalesced into a later run when all 8 fell behind)."""
    fired: list[str] = []
    start = trio.Event()
    async with echomq.connect(redis_url) as conn:

        async def scheduler(*, task_status: trio.TaskStatus[None]) -> None:
            async with echomq.connect(redis_url) as c:
                await c.execute("PING")
                task_status.started()
                await start.wait()
                while await server_now_ms(c) < last + 20:
                    fired.extend((await repeat.tick(c, queue)).fired)
                    await trio.sleep(0.002)

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                for _ in range(8):
                    await nursery.start(scheduler)
                added = await add(conn, queue, "race", schedule=repeat.Schedule.of(every=0.02))
                last = added.next_ms + 11 * 20
                start.set()
        assert fired and len(fired) == len(set(fired))
        slots = sorted(int(job_id.split("~")[1]) for job_id in fired)
        assert slots[0] >= added.next_ms and slots[-1] >= last
        assert all((slot - added.next_ms) % 20 == 0 for slot in slots)
        record = await repeat.get(conn, queue, "race")
        assert record.runs == len(fired)
        assert record.runs + record.coalesced == (slots[-1] - added.next_ms) // 20 + 1
        assert await conn.execute("ZCARD", ks.pending) == len(fired)


async def test_a_stale_compare_and_set_writes_nothing(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    added = await add(conn, queue, "k")
    await due(conn, added.next_ms)
    info = await repeat.get(conn, queue, "k")
    plan = info.schedule.plan(added.next_ms, added.next_ms, "once", 1000)
    before = await snapshot(conn, ks)
    stale = fire_call(queue, info, added.next_ms - 50, plan)
    assert await echomq._scripts.calls.evaluate(conn, stale) is FireOutcome.RACED
    assert await snapshot(conn, ks) == before


async def test_a_slot_whose_job_exists_advances_without_a_second_job(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """Enqueue-if-absent: a run id already there is the slot fired (next still moves)."""
    added = await add(conn, queue, "k")
    await jobs.enqueue(conn, queue, b"earlier", job_id=f"k~{added.next_ms}")
    await due(conn, added.next_ms)
    info = await repeat.get(conn, queue, "k")
    plan = info.schedule.plan(added.next_ms, added.next_ms, "once", 1000)
    outcome = await echomq._scripts.calls.evaluate(
        conn, fire_call(queue, info, added.next_ms, plan)
    )
    assert outcome is FireOutcome.EXISTS
    assert await conn.execute("ZCARD", ks.pending) == 1
    record = await repeat.get(conn, queue, "k")
    assert (record.next_ms, record.runs) == (plan.next_ms, 0)


async def test_missed_once_runs_one_late_run_after_downtime(
    conn: echomq.Connection, queue: str
) -> None:
    """No scheduler for ~6 slots: one run (the latest due slot), the rest coalesced."""
    added = await add(conn, queue, "k")
    await due(conn, added.next_ms + 300)
    tick = await repeat.tick(conn, queue)
    assert len(tick.fired) == 1
    record = await repeat.get(conn, queue, "k")
    slot = int(tick.fired[0].split("~")[1])
    assert slot == record.last_slot and (slot - added.next_ms) % 50 == 0
    assert record.coalesced == (slot - added.next_ms) // 50 >= 6
    assert record.next_ms == slot + 50 > tick.now_ms


async def test_missed_skip_drops_a_run_later_than_its_grace(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    added = await add(conn, queue, "k", missed="skip", grace_ms=1)
    await due(conn, added.next_ms + 300)
    tick = await repeat.tick(conn, queue)
    assert (tick.fired, tick.skipped) == ([], ["k"])
    record = await repeat.get(conn, queue, "k")
    assert record.skipped >= 6 and record.runs == 0
    assert record.next_ms is not None and record.next_ms > tick.now_ms
    assert await conn.execute("ZCARD", ks.pending) == 0


async def test_missed_skip_still_fires_a_run_late_within_its_grace(
    conn: echomq.Connection, queue: str
) -> None:
    """Late by less than a period and less than the grace: the scheduler kept up."""
    every = repeat.Schedule.of(every=0.5)
    added = await add(conn, queue, "k", schedule=every, missed="skip", grace_ms=60_000)
    await due(conn, added.next_ms + 100)
    tick = await repeat.tick(conn, queue)
    assert tick.fired == [f"k~{added.next_ms}"] or tick.now_ms >= added.next_ms + 500


async def test_pause_and_resume_a_repeatable(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """Paused: never due (score +inf); resumed: from its first slot after now."""
    added = await add(conn, queue, "k")
    assert await repeat.pause(conn, queue, "k") is True
    assert await repeat.pause(conn, queue, "k") is False
    assert await conn.execute("ZSCORE", ks.repeat, "k") == b"inf"
    await due(conn, added.next_ms + 100)
    assert (await repeat.tick(conn, queue)).fired == []
    assert (await repeat.get(conn, queue, "k")).paused
    before = await server_now_ms(conn)
    next_ms = await repeat.resume(conn, queue, "k")
    assert next_ms >= before + 50
    assert await repeat.resume(conn, queue, "k") == next_ms  # running: unchanged
    await due(conn, next_ms)
    assert (await repeat.tick(conn, queue)).fired == [f"k~{next_ms}"]


async def test_a_paused_queue_fires_nothing(conn: echomq.Connection, queue: str) -> None:
    added = await add(conn, queue, "k")
    await echomq.admin.pause(conn, queue)
    await due(conn, added.next_ms)
    tick = await repeat.tick(conn, queue)
    assert tick.paused and tick.fired == []
    await echomq.admin.resume(conn, queue)
    assert len((await repeat.tick(conn, queue)).fired) == 1


async def test_remove_and_unknown_keys(conn: echomq.Connection, queue: str, ks: Keyspace) -> None:
    await add(conn, queue, "k")
    await repeat.remove(conn, queue, "k")
    assert await conn.execute("EXISTS", ks.repeat_record("k"), ks.repeat) == 0
    for verb in (repeat.remove, repeat.pause, repeat.resume, repeat.get):
        with pytest.raises(RepeatNotFound):
            await verb(conn, queue, "k")


async def test_list_orders_by_next_slot_paused_last(conn: echomq.Connection, queue: str) -> None:
    await add(conn, queue, "hourly", schedule=repeat.Schedule.of(every=3600))
    await add(conn, queue, "minutely", schedule=repeat.Schedule.of(cron="* * * * *"))
    await add(conn, queue, "stopped", schedule=repeat.Schedule.of(every=1))
    await repeat.pause(conn, queue, "stopped")
    listing = await repeat.list_repeats(conn, queue)
    assert [r.key for r in listing.records] == ["minutely", "hourly", "stopped"]
    assert (listing.total, listing.paused) == (3, 1)
    upcoming = listing.records[0].upcoming(3)
    assert [b - a for a, b in itertools.pairwise(upcoming)] == [60_000, 60_000]
    assert listing.records[2].upcoming(3) == []
    stats = await echomq.admin.stats(conn, queue)
    assert (stats.repeats, stats.repeats_paused) == (3, 1)


async def test_a_record_of_a_newer_format_is_refused_not_misread(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A newer echomq's record: get/add/pause refuse it, the scheduler and list skip it,
    remove deletes it."""
    added = await add(conn, queue, "new")
    await conn.execute("HSET", ks.repeat_record("new"), "v", "2", "every_ms", "x")
    with pytest.raises(RepeatFormatError, match="layout version 2"):
        await repeat.get(conn, queue, "new")
    before = await snapshot(conn, ks)
    for call in (lambda: add(conn, queue, "new"), lambda: repeat.pause(conn, queue, "new")):
        with pytest.raises(RepeatFormatError):
            await call()
    assert await snapshot(conn, ks) == before
    await due(conn, added.next_ms)
    tick = await repeat.tick(conn, queue)
    assert (tick.fired, tick.unreadable) == ([], ["new"])
    assert [key for key, _ in (await repeat.list_repeats(conn, queue)).unreadable] == ["new"]
    await repeat.remove(conn, queue, "new")
    assert (await repeat.list_repeats(conn, queue)).total == 0


async def test_a_malformed_record_never_stops_the_others(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """A record edited by hand (a cron that does not parse) is refused like a newer one,
    and the scheduler's pass still fires every other due key."""
    bad = await add(conn, queue, "bad")
    good = await add(conn, queue, "good")
    await conn.execute("HSET", ks.repeat_record("bad"), "every_ms", "", "cron", "bogus")
    with pytest.raises(RepeatFormatError, match="malformed"):
        await repeat.get(conn, queue, "bad")
    await due(conn, max(bad.next_ms, good.next_ms))
    tick = await repeat.tick(conn, queue)
    assert tick.unreadable == ["bad"] and [j.split("~")[0] for j in tick.fired] == ["good"]


async def test_drain_spares_the_registry_and_obliterate_removes_it(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """Seed 004: drain keeps the cadence; obliterate deletes the records, under its budget."""
    for n in range(12):
        await add(conn, queue, f"r{n}", schedule=repeat.Schedule.of(every=3600))
    await jobs.enqueue_batch(conn, queue, [jobs.NewJob(payload=b"", dedup="d", dedup_ms=60_000)])
    await echomq.admin.drain(conn, queue)
    assert (await repeat.list_repeats(conn, queue)).total == 12
    await echomq.admin.pause(conn, queue)
    steps = 0
    while not await echomq.admin.obliterate(conn, queue, budget=5):
        steps += 1
        assert steps < 20
    assert steps >= 2  # 12 records, a registry, a dedup key and meta: more than one budget
    assert await snapshot(conn, ks) == {}


async def test_bad_input_is_refused_before_any_io(closed_port_url: str) -> None:
    async with echomq.connect(closed_port_url) as c:
        with pytest.raises(InvalidKey):
            await repeat.add(c, "q", "bad key", task="t", payload=b"", schedule=EVERY_50MS)
        with pytest.raises(InvalidKey):
            await repeat.add(c, "q", "k" * 101, task="t", payload=b"", schedule=EVERY_50MS)
        with pytest.raises(InvalidArgument):
            await repeat.add(c, "q", "k", task="", payload=b"", schedule=EVERY_50MS)
        with pytest.raises(InvalidArgument):
            await repeat.add(
                c, "q", "k", task="t", payload=b"", schedule=EVERY_50MS, missed="always"
            )  # type: ignore[arg-type]
        for verb in (repeat.remove, repeat.pause, repeat.get):
            with pytest.raises(InvalidKey):
                await verb(c, "q", "a:b")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"cron": "* * * *"}, "5 fields"),
        ({"cron": "61 * * * *"}, "malformed cron"),
        ({"cron": "0 0 30 2 *"}, "malformed cron|never fires"),
        ({"every": 0}, "> 0"),
        ({"every": -1.5}, "> 0"),
        ({"every": dt.timedelta(0)}, "> 0"),
        ({"every": 0.0001}, "at least 1 ms"),
        ({"cron": "* * * * *", "tz": "Mars/Olympus"}, "unknown time zone"),
        ({"every": 5, "tz": "UTC"}, "tz applies"),
        ({"every": 5, "cron": "* * * * *"}, "one"),
        ({}, "one"),
    ],
)
def test_bad_schedules_are_typed_errors(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        repeat.Schedule.of(**kwargs)
