"""Schedules: intervals, cron in a time zone across DST days, missed-run plans (no server)."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest

import echomq
from echomq._model.options import TaskOptions
from echomq._model.schedule import Schedule, duration_ms
from echomq.errors import InvalidArgument

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def ms(*args: int, tz: ZoneInfo = BERLIN, fold: int = 0) -> int:
    return round(dt.datetime(*args, tzinfo=tz, fold=fold).timestamp() * 1000)  # type: ignore[misc]


def local(slot: int, tz: ZoneInfo = BERLIN) -> str:
    return dt.datetime.fromtimestamp(slot / 1000, tz).isoformat()


def slots(schedule: Schedule, start: int, n: int) -> list[str]:
    out, at = [], start
    for _ in range(n):
        at = schedule.after(at)
        out.append(local(at, schedule.zone))
    return out


def test_an_interval_counts_from_its_argument() -> None:
    every = Schedule.of(every=dt.timedelta(minutes=1, seconds=30))
    assert every.every_ms == 90_000
    assert every.after(1_000) == 91_000
    assert every.describe() == "every 1m30s"
    assert Schedule.of(every=0.25).describe() == "every 250ms"


def test_spring_forward_a_daily_run_in_the_gap_runs_after_it() -> None:
    """Europe/Berlin 2025-03-30: 02:00 -> 03:00. A 02:30 run happens at 03:00 that day."""
    daily = Schedule.of(cron="30 2 * * *", tz="Europe/Berlin")
    assert slots(daily, ms(2025, 3, 28, 12), 4) == [
        "2025-03-29T02:30:00+01:00",
        "2025-03-30T03:00:00+02:00",
        "2025-03-31T02:30:00+02:00",
        "2025-04-01T02:30:00+02:00",
    ]


def test_spring_forward_an_hourly_run_skips_the_missing_hour() -> None:
    """A '*' hour follows the clock: 01:00, then 03:00 (one real hour later)."""
    hourly = Schedule.of(cron="0 * * * *", tz="Europe/Berlin")
    got = [hourly.after(ms(2025, 3, 30, 0, 30))]
    got.append(hourly.after(got[0]))
    assert [local(s) for s in got] == ["2025-03-30T01:00:00+01:00", "2025-03-30T03:00:00+02:00"]
    assert got[1] - got[0] == 3_600_000


def test_fall_back_a_daily_run_in_the_repeated_hour_runs_once() -> None:
    """Europe/Berlin 2025-10-26: 03:00 -> 02:00. A 02:30 run happens once (first pass)."""
    daily = Schedule.of(cron="30 2 * * *", tz="Europe/Berlin")
    assert slots(daily, ms(2025, 10, 24, 12), 4) == [
        "2025-10-25T02:30:00+02:00",
        "2025-10-26T02:30:00+02:00",
        "2025-10-27T02:30:00+01:00",
        "2025-10-28T02:30:00+01:00",
    ]


def test_fall_back_a_half_hourly_run_runs_in_both_passes() -> None:
    every_half_hour = Schedule.of(cron="*/30 * * * *", tz="Europe/Berlin")
    assert slots(every_half_hour, ms(2025, 10, 26, 1, 45), 5) == [
        "2025-10-26T02:00:00+02:00",
        "2025-10-26T02:30:00+02:00",
        "2025-10-26T02:00:00+01:00",
        "2025-10-26T02:30:00+01:00",
        "2025-10-26T03:00:00+01:00",
    ]


def test_after_is_strictly_later_from_inside_the_repeated_hour() -> None:
    """From 02:15 of the second pass, the 02:30 of the first is past: the next is tomorrow."""
    daily = Schedule.of(cron="30 2 * * *", tz="Europe/Berlin")
    second_pass = ms(2025, 10, 26, 2, 15, fold=1)
    nxt = daily.after(second_pass)
    assert nxt > second_pass
    assert local(nxt) == "2025-10-27T02:30:00+01:00"


def test_new_york_dst_days() -> None:
    """The same rules in another zone (2025-03-09 spring forward, 2025-11-02 fall back)."""
    daily = Schedule.of(cron="30 2 * * *", tz="America/New_York")
    spring = slots(daily, ms(2025, 3, 8, 12, tz=NEW_YORK), 2)
    assert spring == ["2025-03-09T03:00:00-04:00", "2025-03-10T02:30:00-04:00"]
    fall = slots(
        Schedule.of(cron="30 1 * * *", tz="America/New_York"), ms(2025, 11, 1, 12, tz=NEW_YORK), 2
    )
    assert fall == ["2025-11-02T01:30:00-04:00", "2025-11-03T01:30:00-05:00"]


def test_utc_is_the_default_zone() -> None:
    cron = Schedule.of(cron="0 9 * * MON")
    assert cron.tz == "UTC" and cron.describe() == "cron 0 9 * * MON (UTC)"
    monday = cron.after(round(dt.datetime(2025, 1, 1, tzinfo=dt.UTC).timestamp() * 1000))
    assert (
        dt.datetime.fromtimestamp(monday / 1000, dt.UTC).isoformat() == "2025-01-06T09:00:00+00:00"
    )


def test_plan_of_an_interval_coalesces_the_slots_missed() -> None:
    every = Schedule.of(every=10)  # 10 s
    on_time = every.plan(100_000, 100_020, "once", 60_000)
    assert (on_time.slot, on_time.next_ms, on_time.coalesced, on_time.fire) == (
        100_000,
        110_000,
        0,
        True,
    )
    late = every.plan(100_000, 135_000, "once", 60_000)
    assert (late.slot, late.next_ms, late.coalesced, late.fire) == (130_000, 140_000, 3, True)
    assert not every.plan(100_000, 135_000, "skip", 60_000).fire  # it fell behind: skip
    assert every.plan(100_000, 105_000, "skip", 60_000).fire  # late, but it kept up
    assert not every.plan(100_000, 105_000, "skip", 1_000).fire  # later than the grace


def test_plan_of_a_cron_after_a_long_downtime_jumps_to_now() -> None:
    minutely = Schedule.of(cron="* * * * *")
    due = 1_700_000_040_000  # a whole minute
    now = due + 3 * 24 * 3600 * 1000 + 12_345  # three days later
    plan = minutely.plan(due, now, "once", 60_000)
    assert plan.slot <= now < plan.next_ms
    assert plan.next_ms - plan.slot == 60_000 and plan.slot % 60_000 == 0
    assert plan.coalesced >= 1000
    short = minutely.plan(due, due + 150_000, "once", 60_000)
    assert (short.slot, short.coalesced, short.next_ms) == (due + 120_000, 2, due + 180_000)


def test_upcoming_lists_the_next_slots() -> None:
    cron = Schedule.of(cron="*/5 * * * *")
    first = cron.after(1_700_000_000_000)
    assert cron.upcoming(first, 3) == [first, first + 300_000, first + 600_000]


def test_durations() -> None:
    assert duration_ms("x", dt.timedelta(milliseconds=1)) == 1
    assert duration_ms("x", 2) == 2000
    for bad in (0, -1, float("nan"), float("inf"), True, "5", dt.timedelta(days=-1)):
        with pytest.raises(InvalidArgument):
            duration_ms("x", bad)


def test_task_options_check_the_schedule_when_built() -> None:
    assert TaskOptions(cron="*/5 * * * *", tz="Europe/Berlin").schedule() == Schedule(
        cron="*/5 * * * *", tz="Europe/Berlin"
    )
    assert TaskOptions().schedule() is None
    for bad in ({"cron": "nope"}, {"every": 0}, {"cron": "* * * * *", "tz": "Nowhere/City"},
                {"tz": "UTC"}, {"missed": "sometimes"}):  # fmt: skip
        with pytest.raises(InvalidArgument):
            TaskOptions(**bad)  # type: ignore[arg-type]


def test_a_repeatable_task_needs_a_name_that_is_a_repeat_key() -> None:
    queue = echomq.Queue("q")

    @queue.task(name="reports.hourly", cron="0 * * * *")
    def hourly() -> None: ...

    assert hourly.options.schedule() is not None

    def inner() -> None: ...

    with pytest.raises(InvalidArgument, match="repeat key"):
        queue.task(name="has space", every=5)(inner)
    with pytest.raises(InvalidArgument, match="repeat key"):
        queue.task(every=5)(inner)  # module.<locals>.inner
    with pytest.raises(InvalidArgument, match="malformed cron"):
        queue.task(cron="99 * * * *")(inner)
