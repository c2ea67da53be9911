"""Helpers for the archive tests: completions entries written the way the scripts write
them (until they do), and waits on observable state."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

import echomq
from _waits import until as _until
from echomq._scripts.keyspace import Keyspace
from echomq.archive.store import open_store


def completion_fields(job_id: str, state: str = "completed", **fields: Any) -> dict[str, Any]:
    """A completions entry's fields in the contract's shape (docs/results.md)."""
    base: dict[str, Any] = {
        "id": job_id,
        "task": "tests.work",
        "state": state,
        "token": 1,
        "failures": 0 if state != "dead" else 1,
        "created_at": 1_700_000_000_000,
        "claimed_at": 1_700_000_000_100,
        "finished_at": 1_700_000_000_200,
    }
    if state == "completed":
        base["result"] = b'"ok"'
    elif state == "dead":
        base["error"] = "ValueError: boom"
    else:
        base["reason"] = "user asked"
    base.update(fields)
    return {k: v for k, v in base.items() if v is not None}


async def xadd(conn: echomq.Connection, queue: str, fields: Mapping[str, Any]) -> str:
    """XADD one entry to the queue's completions stream; answers its id."""
    flat: list[Any] = []
    for name, value in fields.items():
        flat += [name, value]
    entry_id = await conn.execute("XADD", Keyspace(queue).completions, "*", *flat)
    return str(entry_id.decode())


async def xadd_jobs(
    conn: echomq.Connection, queue: str, count: int, *, prefix: str = "j"
) -> list[str]:
    """``count`` completed-job entries (ids ``prefix0``...), in one pipeline."""
    key = Keyspace(queue).completions
    commands = []
    for i in range(count):
        flat: list[Any] = []
        for name, value in completion_fields(
            f"{prefix}{i}", finished_at=1_700_000_000_000 + i
        ).items():
            flat += [name, value]
        commands.append(["XADD", key, "*", *flat])
    replies = await conn.execute_pipeline(commands)
    return [r.decode() for r in replies]


async def until(check: Callable[[], bool | Awaitable[bool]], within: float = 10.0) -> None:
    """``_waits.until``, bound 10 s: these tests wait on worker processes and stores."""
    await _until(check, within)


def stored(store_url: str, queue: str) -> int:
    """How many jobs of ``queue`` the store holds (blocking; opens and closes it)."""
    store = open_store(store_url)
    try:
        return store.count(queue)
    finally:
        store.close()


async def stored_async(store_url: str, queue: str) -> int:
    return await trio.to_thread.run_sync(stored, store_url, queue)


async def pending(conn: echomq.Connection, queue: str, group: str | None = None) -> int:
    """Entries delivered to ``group`` (None: to any group of the stream) and not yet
    acknowledged."""
    key = Keyspace(queue).completions
    try:
        if group is not None:
            return int((await conn.execute("XPENDING", key, group))[0])
        groups = await conn.execute("XINFO", "GROUPS", key)
    except echomq.errors.ServerError:
        return 0
    return sum(int(dict(zip(g[::2], g[1::2], strict=True))[b"pending"]) for g in groups)
