"""One connection, many callers: every caller gets its own reply, in any interleaving."""

from __future__ import annotations

import uuid

import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import echomq
from echomq.errors import ServerError
from echomq.testing import RedisServer

CALLERS = 1000

small_values = st.lists(st.binary(max_size=200), min_size=1, max_size=30)
# a few large values (4 KiB to 1 MiB), given to the first callers only
large_values = st.lists(
    st.tuples(st.binary(min_size=1, max_size=16), st.integers(1 << 12, 1 << 20)), max_size=3
)


def _value(i: int, small: list[bytes], large: list[bytes]) -> bytes:
    """Caller ``i``'s value: unique (its number first), binary, empty tail allowed."""
    tail = large[i] if i < len(large) else small[i % len(small)]
    return i.to_bytes(2, "big") + tail


async def _callers(url: str, small: list[bytes], large: list[bytes]) -> None:
    prefix = f"wire:{uuid.uuid4().hex}"
    replies: dict[int, object] = {}
    async with echomq.connect(url) as conn:

        async def caller(i: int) -> None:
            value = _value(i, small, large)
            key = f"{prefix}:{i}"
            if i % 4 == 0:
                replies[i] = await conn.execute("ECHO", value)
            elif i % 4 == 1:
                await conn.execute("SET", key, value)
                replies[i] = await conn.execute("GET", key)
            elif i % 4 == 2:
                replies[i] = await conn.execute("EVAL", "return ARGV[1]", 0, value)
            else:  # an error reply goes to its own caller only
                await conn.execute("SET", key, value + b"x")  # never an integer
                try:
                    await conn.execute("INCR", key)
                except ServerError as exc:
                    replies[i] = ("error", value, str(exc))

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                for i in range(CALLERS):
                    nursery.start_soon(caller, i)
        await conn.execute("UNLINK", *(f"{prefix}:{i}" for i in range(CALLERS)))

    for i in range(CALLERS):
        value = _value(i, small, large)
        if i % 4 == 3:
            assert replies[i] == ("error", value, "ERR value is not an integer or out of range")
        else:
            assert replies[i] == value, f"caller {i} got another caller's reply"


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(small=small_values, large=large_values)
def test_thousand_concurrent_callers_each_get_their_own_reply(
    redis_server: RedisServer, small: list[bytes], large: list[tuple[bytes, int]]
) -> None:
    """1,000 tasks share one connection; binary, empty and large values reach their caller."""
    big = [(seed * (size // len(seed) + 1))[:size] for seed, size in large]
    trio.run(_callers, redis_server.url, small, big)


async def test_megabyte_values_round_trip(conn: echomq.Connection, queue: str) -> None:
    """A value larger than the receive buffer (several reads) comes back whole."""
    value = bytes(range(256)) * 8192  # 2 MiB
    await conn.execute("SET", queue, value)
    assert await conn.execute("GET", queue) == value
    assert await conn.execute("STRLEN", queue) == len(value)


async def test_nested_error_inside_an_array_reply_is_a_value(conn: echomq.Connection) -> None:
    """An error nested in an array (a script's table) does not raise; the top level does."""
    reply = await conn.execute("EVAL", "return {1, redis.error_reply('NOPE inner')}", 0)
    assert reply[0] == 1
    assert "NOPE inner" in str(reply[1])
    try:
        await conn.execute("EVAL", "return redis.error_reply('NOPE top')", 0)
    except ServerError as exc:
        assert str(exc) == "NOPE top"
    else:
        raise AssertionError("a top-level error reply must raise ServerError")
