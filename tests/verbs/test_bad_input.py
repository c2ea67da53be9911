"""Bad input raises a typed error before any I/O.

The connection points at a closed port: a verb that reached the wire would raise
ConnectionLost, so the typed error proves the gate ran first.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

import echomq
from echomq import admin, jobs, stalled
from echomq._scripts import validate as v
from echomq.errors import (
    ConnectionLost,
    InvalidArgument,
    InvalidKey,
    SerializationError,
)

Verb = Callable[[echomq.Connection], Awaitable[Any]]

BAD_IDS = ["", "has space", "a/b", "x" * 129, "ünï", "emq:{q}", None, 7]
BAD_LEASES = [0, -1, 1.5, True, "10", None, 2**41]

CASES: list[tuple[str, Verb, type[Exception]]] = [
    *[
        (f"queue {q!r}", lambda c, q=q: jobs.enqueue(c, q, b""), InvalidKey)
        for q in ["", "a b", "{q}", "x" * 129, 5]
    ],
    *[
        (f"job_id {j!r}", lambda c, j=j: jobs.enqueue(c, "q", b"", job_id=j), InvalidKey)
        for j in BAD_IDS
        if j is not None
    ],
    *[(f"get_job {j!r}", lambda c, j=j: jobs.get_job(c, "q", j), InvalidKey) for j in BAD_IDS],
    *[
        (f"extend lease {v!r}", lambda c, v=v: jobs.extend_lock(c, "q", "j", 1, v), InvalidArgument)
        for v in BAD_LEASES
    ],
    *[
        (f"claim lease {v!r}", lambda c, v=v: jobs.claim(c, "q", v), InvalidArgument)
        for v in BAD_LEASES
    ],
    *[
        (
            f"extend_locks lease {v!r}",
            lambda c, v=v: jobs.extend_locks(c, "q", [], v),
            InvalidArgument,
        )
        for v in BAD_LEASES
    ],
    *[
        (f"claim count {n!r}", lambda c, n=n: jobs.claim(c, "q", 100, count=n), InvalidArgument)
        for n in [0, -1, v.MAX_COUNT + 1, 2.0, True, "3"]
    ],
    *[
        (f"priority {p!r}", lambda c, p=p: jobs.enqueue(c, "q", b"", priority=p), InvalidArgument)
        for p in [4096, -4096, 1.0, False, "1"]
    ],
    *[
        (f"delay {d!r}", lambda c, d=d: jobs.enqueue(c, "q", b"", delay_ms=d), InvalidArgument)
        for d in [-1, 0.5, 2**41, "5"]
    ],
    *[
        (
            f"max_attempts {m!r}",
            lambda c, m=m: jobs.enqueue(c, "q", b"", max_attempts=m),
            InvalidArgument,
        )
        for m in [0, -2, 1.0, True]
    ],
    *[
        (f"payload {p!r}", lambda c, p=p: jobs.enqueue(c, "q", p), SerializationError)
        for p in [None, 5, {"a": 1}, bytearray(b"x"), ["x"], "\ud800"]
    ],
    *[
        (f"token {t!r}", lambda c, t=t: jobs.complete(c, "q", "j", t, b""), InvalidArgument)
        for t in [0, -1, 1.0, True, "1", None]
    ],
    *[
        (f"fail token {t!r}", lambda c, t=t: jobs.fail(c, "q", "j", t, "e"), InvalidArgument)
        for t in [0, "2"]
    ],
    ("complete result", lambda c: jobs.complete(c, "q", "j", 1, 3.5), SerializationError),  # type: ignore[arg-type]
    *[
        (
            f"retention {name}={value!r}",
            lambda c, name=name, value=value: admin.set_retention(c, "q", **{name: value}),
            InvalidArgument,
        )
        for name, value in [
            ("keep_result", -1),
            ("keep_result", float("nan")),
            ("keep_dead", 2**41),
            ("keep_dead", "1"),
            ("max_completed", 0),
            ("max_dead", 1.5),
            ("completions_max", -1),
            ("max_log_lines", True),
            ("keep_forever", 1),
        ]
    ],
    ("retention nothing", lambda c: admin.set_retention(c, "q"), InvalidArgument),
    ("stats minutes", lambda c: admin.stats(c, "q", minutes=0), InvalidArgument),
    ("stats minutes high", lambda c: admin.stats(c, "q", minutes=721), InvalidArgument),
    (
        "enqueue_many task name",
        lambda c: jobs.enqueue_many(c, "q", [jobs.NewJob(payload=b"", task="")]),
        InvalidArgument,
    ),
    (
        "enqueue_many keep",
        lambda c: jobs.enqueue_many(c, "q", [jobs.NewJob(payload=b"", keep_result_ms=-1)]),
        InvalidArgument,
    ),
    ("fail error text", lambda c: jobs.fail(c, "q", "j", 1, b"bytes"), InvalidArgument),  # type: ignore[arg-type]
    ("fail delay", lambda c: jobs.fail(c, "q", "j", 1, "e", retry_delay_ms=-5), InvalidArgument),
    ("extend id", lambda c: jobs.extend_lock(c, "q", "a b", 1, 100), InvalidKey),
    ("extend_locks id", lambda c: jobs.extend_locks(c, "q", [("a b", 1)], 100), InvalidKey),
    ("extend_locks token", lambda c: jobs.extend_locks(c, "q", [("j", 0)], 100), InvalidArgument),
    ("extend_locks not pairs", lambda c: jobs.extend_locks(c, "q", ["j"], 100), InvalidArgument),  # type: ignore[list-item]
    ("extend_locks a dict", lambda c: jobs.extend_locks(c, "q", {"j": 1}, 100), InvalidArgument),  # type: ignore[arg-type]
    ("release token", lambda c: jobs.release(c, "q", [("j", True)]), InvalidArgument),
    ("reap limit", lambda c: jobs.reap(c, "q", limit=0), InvalidArgument),
    ("reap limit high", lambda c: jobs.reap(c, "q", limit=v.MAX_BATCH + 1), InvalidArgument),
    ("reap recoveries", lambda c: jobs.reap_counted(c, "q", max_recoveries=-2), InvalidArgument),
    ("stalled max", lambda c: stalled.check(c, "q", max_stalled=0), InvalidArgument),
    ("stalled limit", lambda c: stalled.check(c, "q", limit=v.MAX_BATCH + 1), InvalidArgument),
    (
        "enqueue_many over the cap",
        lambda c: jobs.enqueue_many(c, "q", [jobs.NewJob(payload=b"")] * (v.MAX_ENQUEUE + 1)),
        InvalidArgument,
    ),
    (
        "extend_locks over the cap",
        lambda c: jobs.extend_locks(c, "q", [(f"j{i}", 1) for i in range(v.MAX_HELD + 1)], 100),
        InvalidArgument,
    ),
    (
        "release over the cap",
        lambda c: jobs.release(c, "q", [(f"j{i}", 1) for i in range(v.MAX_HELD + 1)]),
        InvalidArgument,
    ),
    ("complete_many empty", lambda c: jobs.complete_many(c, "q", []), InvalidArgument),
    (
        "complete_many over the cap",
        lambda c: jobs.complete_many(c, "q", [(f"j{i}", 1, b"") for i in range(v.MAX_HELD + 1)]),
        InvalidArgument,
    ),
    (
        "complete_many twice",
        lambda c: jobs.complete_many(c, "q", [("j", 1, b""), ("j", 2, b"")]),
        InvalidArgument,
    ),
    ("complete_many id", lambda c: jobs.complete_many(c, "q", [("a b", 1, b"")]), InvalidKey),
    ("complete_many token", lambda c: jobs.complete_many(c, "q", [("j", 0, b"")]), InvalidArgument),
    (
        "complete_many result",
        lambda c: jobs.complete_many(c, "q", [("j", 1, 5)]),
        SerializationError,
    ),  # type: ignore[list-item]
    (
        "complete_many not triples",
        lambda c: jobs.complete_many(c, "q", [("j", 1)]),
        InvalidArgument,
    ),  # type: ignore[list-item]
    ("complete_many a dict", lambda c: jobs.complete_many(c, "q", {"j": 1}), InvalidArgument),  # type: ignore[arg-type]
    ("stalled queue", lambda c: stalled.check(c, "no spaces"), InvalidKey),
    ("enqueue_many empty", lambda c: jobs.enqueue_many(c, "q", []), InvalidArgument),
    ("enqueue_many not NewJob", lambda c: jobs.enqueue_many(c, "q", [b"x"]), InvalidArgument),  # type: ignore[list-item]
    *[
        (f"group {g!r}", lambda c, g=g: jobs.enqueue(c, "q", b"", group=g), InvalidKey)
        for g in BAD_IDS
        if g is not None
    ],
    (
        "group_concurrency 0",
        lambda c: jobs.enqueue_many(
            c, "q", [jobs.NewJob(payload=b"", group="g", group_concurrency=0)]
        ),
        InvalidArgument,
    ),
    (
        "group_concurrency without a group",
        lambda c: jobs.enqueue_many(c, "q", [jobs.NewJob(payload=b"", group_concurrency=2)]),
        InvalidArgument,
    ),
    *[
        (
            f"set_group_concurrency {n!r}",
            lambda c, n=n: admin.set_group_concurrency(c, "q", n, group="g"),
            InvalidArgument,
        )
        for n in [0, -1, 1.5, True, "2", v.MAX_LIMIT + 1]
    ],
    (
        "set_group_concurrency group",
        lambda c: admin.set_group_concurrency(c, "q", 1, group="a b"),
        InvalidKey,
    ),
    *[
        (f"set_rate_limit {n!r}", lambda c, n=n: admin.set_rate_limit(c, "q", n), InvalidArgument)
        for n in [0, -1, 2.5, False]
    ],
    *[
        (f"rate per {p!r}", lambda c, p=p: admin.set_rate_limit(c, "q", 5, p), InvalidArgument)
        for p in [0, -1, 0.0001, float("inf"), "1"]
    ],
    (
        "rate group and every_group",
        lambda c: admin.set_rate_limit(c, "q", 5, group="g", every_group=True),
        InvalidArgument,
    ),
    ("rate group", lambda c: admin.set_rate_limit(c, "q", 5, group="{x}"), InvalidKey),
    ("drain cursor", lambda c: admin.drain_step(c, "q", cursor="a b"), InvalidKey),
    (
        "enqueue_many one bad id",
        lambda c: jobs.enqueue_many(
            c, "q", [jobs.NewJob(payload=b""), jobs.NewJob(payload=b"", job_id="bad id")]
        ),
        InvalidKey,
    ),
]


@pytest.fixture
async def dead_conn(closed_port_url: str) -> AsyncIterator[echomq.Connection]:
    async with echomq.connect(closed_port_url) as c:
        yield c


async def test_closed_port_really_fails_with_connection_lost(dead_conn: echomq.Connection) -> None:
    """The control: valid input on this connection reaches the wire and fails there."""
    with pytest.raises(ConnectionLost):
        await jobs.claim(dead_conn, "q", 100)


@pytest.mark.parametrize(
    ("verb", "error"), [(v, e) for _, v, e in CASES], ids=[n for n, _, _ in CASES]
)
async def test_bad_input_raises_before_any_io(
    dead_conn: echomq.Connection, verb: Verb, error: type[Exception]
) -> None:
    """Each bad argument raises its typed error (a ValueError), never ConnectionLost."""
    with pytest.raises(error):
        await verb(dead_conn)


def test_input_errors_are_value_errors() -> None:
    """InvalidKey, InvalidArgument and SerializationError are ValueErrors too."""
    for cls in (InvalidKey, InvalidArgument, SerializationError):
        assert issubclass(cls, ValueError)
