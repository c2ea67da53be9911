"""Argument gates shared by the verbs: each raises before any I/O.

The caps (written once in ``lua/include/caps.lua``, read at import by ``_model/caps.py``,
which the task options check them with too) and the integer gates are re-exported here: the
verbs read them as ``validate.MAX_COUNT``. This module adds what only the scripts'
arguments need: tokens, texts, payloads, (id, token) pairs.
"""

from __future__ import annotations

from collections.abc import Iterable

from .. import config
from .._model.caps import (
    MAX_ATTEMPTS,
    MAX_BATCH,
    MAX_BEAT_FIELDS,
    MAX_BUDGET,
    MAX_COUNT,
    MAX_ENQUEUE,
    MAX_FLOW,
    MAX_FLOW_PAGE,
    MAX_HELD,
    MAX_LIMIT,
    MAX_MINUTES,
    MAX_MS,
    MAX_PRIORITY,
    MAX_REPEAT_PAGE,
    MAX_SWEEP,
    int_in,
    non_negative_int,
    positive_int,
)
from ..errors import InvalidArgument, PayloadTooLarge, SerializationError
from .keyspace import check_id

__all__ = [
    "MAX_ATTEMPTS",
    "MAX_BATCH",
    "MAX_BEAT_FIELDS",
    "MAX_BUDGET",
    "MAX_COUNT",
    "MAX_ENQUEUE",
    "MAX_FLOW",
    "MAX_FLOW_PAGE",
    "MAX_HELD",
    "MAX_LIMIT",
    "MAX_MINUTES",
    "MAX_MS",
    "MAX_PRIORITY",
    "MAX_REPEAT_PAGE",
    "MAX_SWEEP",
    "batch_bytes",
    "held_pairs",
    "int_in",
    "non_negative_int",
    "payload_bytes",
    "positive_int",
    "text_arg",
    "token_str",
]


def token_str(value: object) -> str:
    """A fencing token (the row's attempts) as the scripts compare it: a decimal string."""
    return str(positive_int("token", value))


def text_arg(name: str, value: object) -> str:
    """``value`` if it is a str (an error text, a reason), else InvalidArgument."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{name} must be a str, not {type(value).__name__}")
    return value


def payload_bytes(value: object, name: str = "payload") -> bytes:
    """A payload or result as bytes; a str is UTF-8 encoded; anything else is refused, and
    so is anything over ``config.max_payload()`` bytes (:class:`PayloadTooLarge`)."""
    if isinstance(value, bytes):
        data = value
    elif isinstance(value, str):
        try:
            data = value.encode()
        except UnicodeEncodeError as exc:
            raise SerializationError(f"{name} is not encodable as UTF-8: {exc}") from None
    else:
        raise SerializationError(f"{name} must be bytes or str, not {type(value).__name__}")
    limit = config.max_payload()
    if len(data) > limit:
        raise PayloadTooLarge(name, len(data), limit)
    return data


def batch_bytes(total: int) -> None:
    """Refuse a batch whose payloads add up past ``config.MAX_BATCH_BYTES``."""
    if total > config.MAX_BATCH_BYTES:
        raise PayloadTooLarge("the batch's payloads", total, config.MAX_BATCH_BYTES)


def held_pairs(held: Iterable[object], verb: str = "held") -> tuple[list[str], list[str]]:
    """Gate ``(job_id, token)`` pairs (at most ``MAX_HELD``): answer the ids, and argv as
    id, token, id, token..."""
    if isinstance(held, str | bytes | dict):
        raise InvalidArgument("held must be an iterable of (job_id, token) pairs")
    held = list(held)
    if len(held) > MAX_HELD:
        raise InvalidArgument(f"{verb} takes at most {MAX_HELD} pairs per call, not {len(held)}")
    ids: list[str] = []
    argv: list[str] = []
    for pair in held:
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise InvalidArgument(f"held must hold (job_id, token) pairs, not {pair!r}")
        job_id = check_id(pair[0])
        argv += [job_id, token_str(pair[1])]
        ids.append(job_id)
    return ids, argv
