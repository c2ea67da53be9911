"""A schedule's input is refused typed, before any I/O: a huge interval, a zone whose
meaning is the machine's (docs/repeat.md, "Bad input")."""

from __future__ import annotations

import datetime as dt

import pytest

import echomq
from echomq._model.schedule import Schedule, check_tz, duration_ms
from echomq.errors import InvalidArgument


@pytest.mark.parametrize(
    "every",
    [
        1e308,
        1.7976931348623157e308,
        1e20,
        dt.timedelta.max,
        dt.timedelta(days=10**6),
        2**40 / 1000 + 1,
    ],
)
def test_an_interval_past_the_cap_is_invalid_argument_not_overflow(every: object) -> None:
    """1e308 seconds has no millisecond int: it raised OverflowError from round()."""
    with pytest.raises(InvalidArgument, match="at most 2"):
        duration_ms("every", every)
    with pytest.raises(InvalidArgument, match="at most 2"):
        Schedule.of(every=every)


def test_the_cap_itself_is_accepted() -> None:
    assert duration_ms("every", 2**40 / 1000) == 2**40


async def test_queue_repeat_refuses_a_huge_interval_before_any_io(
    closed_port_url: str, queue: str
) -> None:
    q = echomq.Queue(queue, url=closed_port_url)

    @q.task(name="t")
    async def t() -> None: ...

    async with q.open():  # nothing listens there: a call that dialled would be ConnectionLost
        for every in (1e308, dt.timedelta.max):
            with pytest.raises(InvalidArgument):
                await q.repeat(t, every=every)
        with pytest.raises(InvalidArgument, match="not an IANA"):
            await q.repeat(t, cron="* * * * *", tz="localtime")


@pytest.mark.parametrize(
    "name", ["localtime", "posixrules", "Factory", "posix/Europe/Berlin", "right/UTC"]
)
def test_a_zone_whose_meaning_is_the_machines_is_refused(name: str) -> None:
    """Workers in different places would compute different slots for these."""
    with pytest.raises(InvalidArgument, match="not an IANA"):
        check_tz(name)
    with pytest.raises(InvalidArgument):
        Schedule.of(cron="0 9 * * *", tz=name)
    queue = echomq.Queue("q")
    with pytest.raises(InvalidArgument):
        queue.task(name="t", cron="0 9 * * *", tz=name)(lambda: None)


@pytest.mark.parametrize(
    "name", ["Europe/../UTC", "/etc/localtime", "zone.tab", "leapseconds", "Europe/Berlin ", ""]
)
def test_a_name_that_is_not_a_zone_is_refused(name: str) -> None:
    with pytest.raises(InvalidArgument):
        check_tz(name)


@pytest.mark.parametrize(
    "name", ["UTC", "Europe/Berlin", "America/Argentina/Buenos_Aires", "Etc/GMT+5", "Etc/GMT-14"]
)
def test_iana_names_are_accepted(name: str) -> None:
    assert check_tz(name).key == name
