"""No admin verb creates a queue that does not exist: each one that writes (pause, resume,
drain, obliterate, retention, limits) is refused by its script before its first write with
``QueueNotFound``; the reads answer what is there (nothing) and write nothing either.
A queue is made by a worker's start, an enqueue or ``admin.ensure_schema``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import echomq
from echomq import admin
from echomq._scripts.keyspace import Keyspace
from echomq.errors import QueueNotFound

Verb = Callable[[echomq.Connection, str], Awaitable[Any]]

WRITERS: dict[str, Verb] = {
    "pause": admin.pause,
    "resume": admin.resume,
    "drain": admin.drain,
    "drain (schedule too)": lambda c, q: admin.drain(c, q, include_schedule=True),
    "drain_step": admin.drain_step,
    "obliterate": lambda c, q: admin.obliterate(c, q, force=True),
    "obliterate_step": lambda c, q: admin.obliterate_step(c, q, force=True),
    "set_retention": lambda c, q: admin.set_retention(c, q, keep_result=10),
    "set_retention (reset)": lambda c, q: admin.set_retention(c, q, keep_result=None),
    "set_rate_limit": lambda c, q: admin.set_rate_limit(c, q, 10, 1.0),
    "set_rate_limit (every group)": lambda c, q: admin.set_rate_limit(
        c, q, 10, 1.0, every_group=True
    ),
    "set_rate_limit (a group)": lambda c, q: admin.set_rate_limit(c, q, 10, 1.0, group="g"),
    "set_group_concurrency": lambda c, q: admin.set_group_concurrency(c, q, 2),
    "set_group_concurrency (a group)": lambda c, q: admin.set_group_concurrency(c, q, 2, group="g"),
}

READERS: dict[str, Verb] = {
    "is_paused": admin.is_paused,
    "stats": admin.stats,
    "capped": admin.capped,
    "retention": admin.retention,
    "limits": admin.limits,
    "groups": admin.groups,
    "group": lambda c, q: admin.group(c, q, "g"),
    "active_jobs": admin.active_jobs,
    "dead_jobs": admin.dead_jobs,
    "list_jobs": lambda c, q: admin.list_jobs(c, q, state="dead"),
    "reprocess_dead": admin.reprocess_dead,
    "list_workers": admin.list_workers,
}


async def _keys(conn: echomq.Connection, queue: str) -> list[object]:
    keys: list[object] = []
    cursor: object = b"0"
    while True:
        cursor, batch = await conn.execute("SCAN", cursor, "MATCH", Keyspace(queue).pattern)
        keys += batch
        if cursor in (b"0", 0):
            return keys


@pytest.mark.parametrize("name", sorted(WRITERS))
async def test_a_writing_verb_refuses_a_missing_queue_and_writes_nothing(
    conn: echomq.Connection, queue: str, name: str
) -> None:
    typo = queue + "-typo"
    with pytest.raises(QueueNotFound) as refused:
        await WRITERS[name](conn, typo)
    assert refused.value.queue == typo and str(refused.value) == f"no queue {typo!r}"
    assert await _keys(conn, typo) == []
    assert not await admin.queue_exists(conn, typo)


@pytest.mark.parametrize("name", sorted(WRITERS))
async def test_a_writing_verb_runs_once_the_queue_exists(
    conn: echomq.Connection, queue: str, name: str
) -> None:
    await admin.ensure_schema(conn, queue)
    if name.startswith("obliterate"):
        await admin.pause(conn, queue)
    await WRITERS[name](conn, queue)  # no refusal


@pytest.mark.parametrize("name", sorted(READERS))
async def test_a_read_of_a_missing_queue_answers_nothing_and_writes_nothing(
    conn: echomq.Connection, queue: str, name: str
) -> None:
    typo = queue + "-typo"
    await READERS[name](conn, typo)
    assert await _keys(conn, typo) == []
