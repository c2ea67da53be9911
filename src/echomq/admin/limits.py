"""The lanes' limits at run time (docs/lanes.md): the queue's concurrency (its active jobs
across every worker), a group's concurrency, the default of every group, the rate limits
of the queue and of groups. ``echomq.admin`` re-exports them.

Rule 1: a limit is a positive int; ``None`` clears it (no limit, or back to the default);
0 or a negative one is refused here (``InvalidArgument``), before any I/O.
Rule 2: a change takes effect at once for the claims that follow. A lowered limit never
stops running jobs: a group over its limit finishes them and claims none until under it.
A changed default reaches the groups out of the ring through ``lanes_rejoin`` pages (this
verb runs them), and a group waiting for its rate window when its window reopens.
"""

from __future__ import annotations

from typing import Any, Literal

import attrs

from .._model.options import seconds, to_ms
from .._scripts import validate as v
from .._scripts.calls import Executor, ScriptCall, evaluate, script_call
from .._scripts.keyspace import Keyspace, check_group
from .._scripts.replies import as_int, check_status, text
from ..errors import InvalidArgument, ScriptError

__all__ = [
    "EVERY_GROUP",
    "Limits",
    "RATE_KINDS",
    "RateKind",
    "RateLimit",
    "lanes_rejoin_call",
    "limits",
    "set_group_concurrency",
    "set_concurrency",
    "set_limits_call",
    "set_rate_limit",
]

RateKind = Literal["fixed", "sliding"]
RATE_KINDS: tuple[RateKind, ...] = ("fixed", "sliding")
EVERY_GROUP = "*"  # set_limits_call's target for the groups' default ('' = the queue)
_REJOIN_BUDGET = v.MAX_BUDGET


@attrs.frozen(kw_only=True)
class RateLimit:
    """At most ``max_jobs`` jobs started per ``period_ms``: in each window aligned on the
    server clock (``kind`` "fixed"), or in every ``period_ms`` stretch ("sliding")."""

    max_jobs: int
    period_ms: int
    kind: RateKind = "fixed"

    @property
    def per_second(self) -> float:
        return self.max_jobs * 1000.0 / self.period_ms


@attrs.frozen(kw_only=True)
class Limits:
    """A queue's limits: its own concurrency and rate limit, and the defaults of every
    group (a group's own settings win over them: ``admin.groups`` shows them)."""

    concurrency: int | None
    rate: RateLimit | None
    group_concurrency: int | None
    group_rate: RateLimit | None


def _limit(name: str, value: object) -> int:
    """A limit as the script takes it: ``None`` clears (0); else a positive int."""
    if value is None:
        return 0
    return v.positive_int(name, value, v.MAX_LIMIT)


def set_limits_call(
    queue: str,
    target: str,
    *,
    concurrency: int | str | None = "",
    rate_max: int | str | None = "",
    rate_ms: int = 0,
    rate_kind: str = "fixed",
) -> ScriptCall[None]:
    """``target``: '' (the queue), ``EVERY_GROUP`` or a group's name; a value '' is left as
    it is, None clears it."""
    ks = Keyspace(queue)
    if target not in ("", EVERY_GROUP):
        check_group(target)
    if rate_kind not in RATE_KINDS:
        raise InvalidArgument(f"a rate's kind is 'fixed' or 'sliding', not {rate_kind!r}")
    argv: list[Any] = [
        ks.base,
        target,
        "" if concurrency == "" else _limit("concurrency", concurrency),
        "" if rate_max == "" else _limit("max_jobs", rate_max),
        v.positive_int("period_ms", rate_ms, v.MAX_MS) if rate_max not in ("", None) else 0,
        rate_kind,
    ]

    def read(reply: Any) -> None:
        check_status(reply, f"set limits of {queue}")

    return script_call("set_limits", [ks.meta], argv, read)


def lanes_rejoin_call(
    queue: str, cursor: str = "", budget: int = _REJOIN_BUDGET
) -> ScriptCall[tuple[int, str]]:
    ks = Keyspace(queue)
    if cursor:
        check_group(cursor)
    argv = [ks.base, cursor, v.int_in("budget", budget, 1, v.MAX_BUDGET)]

    def read(reply: Any) -> tuple[int, str]:
        if not isinstance(reply, list) or len(reply) != 2:
            raise ScriptError(f"lanes_rejoin {queue}: unexpected reply {reply!r}")
        return as_int(reply[0]), text(reply[1])

    return script_call("lanes_rejoin", [ks.groups], argv, read)


async def _rejoin_all(conn: Executor, queue: str) -> None:
    cursor = ""
    while True:
        _, cursor = await evaluate(conn, lanes_rejoin_call(queue, cursor))
        if not cursor:
            return


async def set_concurrency(conn: Executor, queue: str, limit: int | None) -> None:
    """Cap the queue's running jobs across every worker at ``limit`` (BullMQ's global
    concurrency); ``None`` (or 0) clears it.

    The claim counts the queue's active set, so the cap holds however many workers run,
    and a dead worker's jobs give their room back when recovery takes them out of it. A
    lowered cap never stops running jobs: the queue claims none until under it.

    Raises:
        InvalidArgument: a limit that is not a positive int, None or 0 (before any I/O).
        QueueNotFound: the queue does not exist (no meta hash); nothing was written.
    """
    await evaluate(conn, set_limits_call(queue, "", concurrency=None if limit == 0 else limit))


async def set_group_concurrency(
    conn: Executor, queue: str, limit: int | None, *, group: str | None = None
) -> None:
    """Set the concurrency limit of ``group`` (its own), or with no group the default of
    every group (meta's ``group_concurrency``); ``None`` clears it.

    A group at or over a lowered limit finishes its running jobs and starts none until
    it is under the limit; a raised one lets waiting groups start at once.

    Raises:
        InvalidKey: a bad group name. InvalidArgument: a limit that is not a positive int
            (0 and negative ones are refused). Both before any I/O.
        QueueNotFound: the queue does not exist (no meta hash); nothing was written.
    """
    target = EVERY_GROUP if group is None else group
    await evaluate(conn, set_limits_call(queue, target, concurrency=limit))
    if group is None:
        await _rejoin_all(conn, queue)


async def set_rate_limit(
    conn: Executor,
    queue: str,
    max_jobs: int | None,
    per: float = 1.0,
    *,
    group: str | None = None,
    every_group: bool = False,
    kind: str = "fixed",
) -> None:
    """At most ``max_jobs`` jobs started per ``per`` seconds: for the whole queue (the
    default), for ``group``, or with ``every_group`` for each group that has no rate of its
    own. ``None`` clears it. Enforced by the claim on the server clock (docs/lanes.md).

    ``kind``: "fixed" (the default) counts starts in windows aligned on multiples of the
    period (one counter; up to twice ``max_jobs`` can start across a window's edge);
    "sliding" counts the starts of the last ``per`` seconds (a log of them, kept by the
    claim), so no stretch of ``per`` seconds, wherever it begins, holds more.

    Raises:
        InvalidKey: a bad group name. InvalidArgument: ``max_jobs`` not a positive int, a
            period under 1 ms, a kind other than "fixed" and "sliding", or both ``group``
            and ``every_group``. Before any I/O.
        QueueNotFound: the queue does not exist (no meta hash); nothing was written.
    """
    if group is not None and every_group:
        raise InvalidArgument("give group or every_group, not both")
    period_ms = to_ms("per", seconds("per", per, allow_zero=False)) if max_jobs is not None else 0
    if max_jobs is not None and period_ms < 1:
        raise InvalidArgument(f"per must be at least 1 ms, not {per!r}")
    target = group if group is not None else (EVERY_GROUP if every_group else "")
    call = set_limits_call(queue, target, rate_max=max_jobs, rate_ms=period_ms, rate_kind=kind)
    await evaluate(conn, call)
    if every_group:
        await _rejoin_all(conn, queue)


def rate_of(max_jobs: Any, period: Any, kind: Any = None) -> RateLimit | None:
    if max_jobs is None or period is None:
        return None
    sliding = kind in (b"sliding", "sliding")
    return RateLimit(
        max_jobs=as_int(max_jobs), period_ms=as_int(period), kind="sliding" if sliding else "fixed"
    )


def own_rate(value: bytes) -> RateLimit:
    """A group's own rate as ``gstate`` holds it: ``<max>:<ms>`` or ``<max>:<ms>:sliding``."""
    parts = value.split(b":")
    rate = rate_of(parts[0], parts[1], parts[2] if len(parts) > 2 else None)
    assert rate is not None
    return rate


async def limits(conn: Executor, queue: str) -> Limits:
    """The queue's concurrency and rate limit and the groups' defaults (one HMGET of its
    meta hash)."""
    fields = (
        "rate_max",
        "rate_ms",
        "group_concurrency",
        "group_rate_max",
        "group_rate_ms",
        "concurrency",
        "rate_kind",
        "group_rate_kind",
    )
    reply = await conn.execute("HMGET", Keyspace(queue).meta, *fields)
    if not isinstance(reply, list) or len(reply) != len(fields):
        raise ScriptError(f"limits {queue}: unexpected reply {reply!r}")
    return Limits(
        concurrency=None if reply[5] is None else as_int(reply[5]),
        rate=rate_of(reply[0], reply[1], reply[6]),
        group_concurrency=None if reply[2] is None else as_int(reply[2]),
        group_rate=rate_of(reply[3], reply[4], reply[7]),
    )
