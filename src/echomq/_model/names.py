"""Names: what a queue name and a job id may be.

Rule 1: 1..128 characters of ``[A-Za-z0-9._~-]``; anything else raises
:class:`~echomq.errors.InvalidKey` (a ``ValueError``), before any I/O. The charset keeps a
name safe in a key (no hash-tag braces, no glob characters) and in the JSON of an event.
The key builder (``_redis/keyspace.py``) gates every key with these; options that carry
an id (``EnqueueOptions.job_id``) gate it when they are built.
"""

from __future__ import annotations

import re

from ..errors import InvalidKey

__all__ = ["check_id", "check_queue"]

_VALID = re.compile(r"[A-Za-z0-9._~-]{1,128}")


def _check(kind: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidKey(f"{kind} must be a str, not {type(value).__name__}")
    if _VALID.fullmatch(value) is None:
        raise InvalidKey(
            f"invalid {kind} {value[:140]!r}: use 1..128 characters of [A-Za-z0-9._~-]"
        )
    return value


def check_queue(name: object) -> str:
    """Return ``name`` if it is a valid queue name, else raise InvalidKey."""
    return _check("queue name", name)


def check_id(job_id: object) -> str:
    """Return ``job_id`` if it is a valid job id, else raise InvalidKey."""
    return _check("job id", job_id)
