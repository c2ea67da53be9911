"""Reprocess dead jobs in bulk: the dead set back to pending, a batch per round trip.

Rule 1: no new script. A round reads a window of dead ids (``ZRANGE`` by rank, with their
rows' ``task`` when a task filter is asked: one pipelined read), then sends one
``reprocess_job`` script call per id in one pipeline (``jobs.reprocess_job_call``, the
verb's own call): each call is the verb, atomic on its own, with its refusals.
Rule 2: bounded. A round handles at most ``batch`` (1..1000) ids, and a run at most the
ids that were dead when it began (or ``limit``), so a job that fails again as soon as it
is reprocessed cannot keep the run going. It starts from the oldest (the dead set is
scored by when a row's retention ends: the first to expire first).
Rule 3: not a snapshot. A job that leaves the dead set between the read and its call
(a worker, another operator) is refused by its script (``NotDead``, ``JobGone``) and
counted as ``skipped``; nothing else stops the run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from .._model.caps import positive_int
from .._model.text import raw_text
from .._scripts.calls import evaluate_reply, is_sharded
from .._scripts.keyspace import Keyspace
from .._wire.interface import RedisConnection
from ..errors import InvalidArgument, JobGone, NotDead, ServerError
from ..jobs.rows import reprocess_job_call

__all__ = ["DEFAULT_REPROCESS_BATCH", "MAX_REPROCESS_BATCH", "Reprocessed", "reprocess_dead"]

DEFAULT_REPROCESS_BATCH = 100
MAX_REPROCESS_BATCH = 1000


@attrs.frozen(kw_only=True)
class Reprocessed:
    """What :func:`reprocess_dead` did: ``reprocessed`` jobs back in pending, ``skipped``
    ids that left the dead set before their call, ``looked`` ids read (against
    ``dead_at_start``, the dead set's size when it began), ``rounds`` pipelines of calls."""

    reprocessed: int = 0
    skipped: int = 0
    looked: int = 0
    rounds: int = 0
    dead_at_start: int = 0


async def _read(conn: RedisConnection, commands: list[tuple[Any, ...]]) -> list[Any]:
    replies = await conn.execute_pipeline(commands)
    for reply in replies:
        if isinstance(reply, ServerError):
            raise reply
    return replies


async def reprocess_dead(
    conn: RedisConnection,
    queue: str,
    *,
    task: str | None = None,
    batch: int = DEFAULT_REPROCESS_BATCH,
    limit: int | None = None,
    on_progress: Callable[[Reprocessed], object] | None = None,
) -> Reprocessed:
    """Move dead jobs back to pending, oldest first: every one (``task``: only that task's,
    by the row's ``task`` field), at most ``limit``, ``batch`` per round trip.

    Each job is ``jobs.reprocess_job`` (first in its priority band, ``last_error``
    cleared, counters kept, a worker woken; docs/operations.md). ``on_progress(so_far)``
    runs after every round. The run stops when no dead id is left to look at, when
    ``limit`` jobs were reprocessed, or once it has looked at as many ids as were dead
    when it began (with a task filter the others stay dead, and are looked past).

    Raises:
        InvalidKey, InvalidArgument: before any I/O (``batch`` is 1..1000, ``limit`` > 0).
    """
    ks = Keyspace(queue)
    positive_int("batch", batch, MAX_REPROCESS_BATCH)
    if limit is not None:
        positive_int("limit", limit)
    if task is not None and (not isinstance(task, str) or not task):
        raise InvalidArgument("task must be a non-empty str")
    sharded = is_sharded(conn)
    dead_at_start = int(await conn.execute("ZCARD", ks.dead))
    done = Reprocessed(dead_at_start=dead_at_start)
    looked = 0  # ids examined, against the dead count at the start
    kept = 0  # ids of other tasks looked past: they stay in front of the window
    while looked < dead_at_start and (limit is None or done.reprocessed < limit):
        want = min(batch, dead_at_start - looked)
        if limit is not None:
            want = min(want, limit - done.reprocessed) if task is None else want
        ids = [raw_text(m) for m in await conn.execute("ZRANGE", ks.dead, kept, kept + want - 1)]
        if not ids:
            break
        looked += len(ids)
        if task is not None:
            names = await _read(conn, [("HGET", ks.job(j), "task") for j in ids])
            chosen = [j for j, name in zip(ids, names, strict=True) if name == task.encode()]
            kept += len(ids) - len(chosen)
            if limit is not None:
                chosen = chosen[: limit - done.reprocessed]
        else:
            chosen = ids
        if not chosen:
            done = attrs.evolve(done, looked=looked)
            if on_progress is not None:
                on_progress(done)
            continue
        calls = [reprocess_job_call(queue, j) for j in chosen]
        replies = await conn.execute_pipeline([sc.evalsha_args(sharded) for sc in calls])
        reprocessed = skipped = 0
        for sc, reply in zip(calls, replies, strict=True):
            try:
                await evaluate_reply(conn, sc, reply)
                reprocessed += 1
            except (NotDead, JobGone):
                skipped += 1
        done = attrs.evolve(
            done,
            reprocessed=done.reprocessed + reprocessed,
            skipped=done.skipped + skipped,
            looked=looked,
            rounds=done.rounds + 1,
        )
        if on_progress is not None:
            on_progress(done)
    return done
