"""Names: what a queue name and a job id may be.

Rule 1: 1..128 characters of ``[A-Za-z0-9._~-]``; anything else raises
:class:`~echomq.errors.InvalidKey` (a ``ValueError``), before any I/O. The charset keeps a
name safe in a key (no hash-tag braces, no glob characters) and in the JSON of an event.
The key builder (``_scripts/keyspace.py``) gates every key with these; options that carry
an id (``EnqueueOptions.job_id``) gate it when they are built. A group's name (its lane,
docs/lanes.md) is a name like the others: ``check_group``.
"""

from __future__ import annotations

import re

from ..errors import InvalidKey

__all__ = [
    "MAX_REPEAT_KEY",
    "check_dedup_key",
    "check_group",
    "check_id",
    "check_queue",
    "check_repeat_key",
]

_VALID = re.compile(r"[A-Za-z0-9._~-]{1,128}")
# a repeat run's job id is ``<key>~<slot ms>`` (docs/repeat.md): the key leaves room for the
# slot (up to 16 digits) within the 128 characters of an id
MAX_REPEAT_KEY = 100


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


def check_dedup_key(key: object) -> str:
    """Return ``key`` if it is a valid dedup key (the id rule), else raise InvalidKey."""
    return _check("dedup key", key)


def check_repeat_key(key: object) -> str:
    """Return ``key`` if it is a valid repeat key: the id rule, at most 100 characters
    (:data:`MAX_REPEAT_KEY`), else raise InvalidKey."""
    _check("repeat key", key)
    assert isinstance(key, str)
    if len(key) > MAX_REPEAT_KEY:
        raise InvalidKey(
            f"invalid repeat key {key[:140]!r}: at most {MAX_REPEAT_KEY} characters "
            "(its runs' job ids add '~<slot ms>')"
        )
    return key


def check_group(group: object) -> str:
    """Return ``group`` if it is a valid group name (a lane's), else raise InvalidKey."""
    return _check("group name", group)
