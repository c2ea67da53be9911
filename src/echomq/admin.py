"""The queue-scope operator verbs (seed 004): pause, resume, is_paused, drain, obliterate.

Each takes ``conn, queue`` first, gates its arguments before any I/O, and either answers a
value or raises a typed error from :mod:`echomq.errors` having changed nothing.

- ``pause`` / ``resume``: the gate is the ``paused`` field of ``emq:{q}:meta``; the claim
  script reads it, so the verb ``jobs.claim`` and every worker stop claiming alike. Both are
  idempotent; the backlog is untouched. ``resume`` pushes a wake token so idle workers look.
"""

from __future__ import annotations

from typing import Any

from ._redis.connection import Connection
from ._redis.keyspace import Keyspace
from ._redis.replies import check
from ._redis.scripts import ScriptCall, call, evaluate

__all__ = ["pause", "resume", "is_paused"]


def _ok(what: str) -> Any:
    def read(reply: Any) -> None:
        check(reply, what)

    return read


# -- builders (no I/O) ---------------------------------------------------------------------


def pause_call(queue: str) -> ScriptCall[None]:
    ks = Keyspace(queue)
    return call("pause", [ks.meta], [], _ok(f"pause {queue}"))


def resume_call(queue: str) -> ScriptCall[None]:
    ks = Keyspace(queue)
    return call("resume", [ks.meta, ks.wake], [], _ok(f"resume {queue}"))


# -- verbs ------------------------------------------------------------------------------------


async def pause(conn: Connection, queue: str) -> None:
    """Stop claiming on ``queue`` (verb claim and workers alike). Idempotent."""
    await evaluate(conn, pause_call(queue))


async def resume(conn: Connection, queue: str) -> None:
    """Claim again on ``queue`` and wake idle workers. Idempotent."""
    await evaluate(conn, resume_call(queue))


async def is_paused(conn: Connection, queue: str) -> bool:
    """Whether the claim gate of ``queue`` is set."""
    return bool(await conn.execute("HEXISTS", Keyspace(queue).meta, "paused"))
