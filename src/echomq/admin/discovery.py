"""Queue discovery: which queues exist.

Rule 1: a queue exists when it has a meta hash, ``emq:{q}:meta``. Every script that
creates a queue's first key writes it (``HSETNX meta schema_version``), and a worker
writes it at start; ``obliterate`` deletes it last. Nothing else answers this question:
the CLI's ``status`` and the dashboard both call :func:`list_queues`, and every CLI command
that names a queue asks :func:`queue_exists` first (no command creates a queue by a typo).
Rule 2: discovery reads every master: on a Redis Cluster each queue lives on the master of
its slot, so one ``SCAN`` per master (``Connection.every_master``).
Rule 3: a key is a queue's only if the key builder gives it back: a name that is not a
valid queue name (another program's ``emq:{...}:meta``) is skipped.
"""

from __future__ import annotations

from typing import Any

from .._model.caps import positive_int
from .._scripts.keyspace import Keyspace, queues_pattern
from .._wire.interface import RedisConnection
from ..errors import InvalidKey, QueueNotFound

__all__ = ["list_queues", "queue_exists", "queue_of_meta_key", "require_queue"]

_SCAN_COUNT = 1000


def queue_of_meta_key(key: str) -> str | None:
    """The queue whose meta hash ``key`` is, or None (checked by building it back)."""
    start, end = key.find("{"), key.rfind("}")
    if start < 0 or end <= start:
        return None
    name = key[start + 1 : end]
    try:
        return name if Keyspace(name).meta == key else None
    except InvalidKey:
        return None


async def queue_exists(conn: RedisConnection, queue: str) -> bool:
    """Whether ``queue`` exists (it has its meta hash): one ``EXISTS``, on the queue's master.

    Raises:
        InvalidKey: a bad queue name (before any I/O).
    """
    return bool(await conn.execute("EXISTS", Keyspace(queue).meta))


async def require_queue(conn: RedisConnection, queue: str) -> None:
    """Raise :class:`~echomq.errors.QueueNotFound` unless ``queue`` exists.

    Raises:
        InvalidKey: a bad queue name (before any I/O). QueueNotFound: no meta hash.
    """
    if not await queue_exists(conn, queue):
        raise QueueNotFound(queue)


async def list_queues(conn: RedisConnection, *, limit: int | None = None) -> list[str]:
    """The names of every queue (every ``emq:{q}:meta``), sorted; at most ``limit``.

    Scans every master of a cluster. A SCAN is not a snapshot: a queue created or
    obliterated while it runs may or may not be listed. With ``limit`` the scan stops once
    that many were found (bounded work for a page that shows a few).

    Raises:
        InvalidArgument: ``limit`` is not a positive int (before any I/O).
    """
    if limit is not None:
        positive_int("limit", limit)
    pattern = queues_pattern()
    found: set[str] = set()
    for node in await conn.every_master():
        cursor: Any = b"0"
        while True:
            cursor, keys = await node.execute(
                "SCAN", cursor, "MATCH", pattern, "COUNT", _SCAN_COUNT
            )
            for key in keys:
                name = queue_of_meta_key(key.decode("utf-8", "replace"))
                if name is not None:
                    found.add(name)
            if cursor in (b"0", 0, "0") or (limit is not None and len(found) >= limit):
                break
    names = sorted(found)
    return names if limit is None else names[:limit]
