"""Argument gates shared by the verbs: each raises before any I/O.

Rule 1: ``bool`` is not an int here (``True`` is not a lease), and neither is ``1.5`` or
``"10"``; bad values raise :class:`~echomq.errors.InvalidArgument` (a ``ValueError``).
Rule 2: every bound keeps the scripts' arithmetic exact: a score is a double, so
``priority * 2^40 + seq`` and ``now + lease`` stay below 2^53, and a batch stays below
Lua's ``unpack`` limit.
"""

from __future__ import annotations

from collections.abc import Iterable

from .. import config
from ..errors import InvalidArgument, PayloadTooLarge, SerializationError
from .keyspace import check_id

__all__ = [
    "MAX_ATTEMPTS",
    "MAX_BATCH",
    "MAX_BUDGET",
    "MAX_COUNT",
    "MAX_ENQUEUE",
    "MAX_HELD",
    "MAX_MS",
    "MAX_PRIORITY",
    "batch_bytes",
    "held_pairs",
    "int_in",
    "non_negative_int",
    "payload_bytes",
    "positive_int",
    "text_arg",
    "token_str",
]

MAX_PRIORITY = 4095  # priority * 2^40 + seq must stay exact in a double score
# Caps on the work one script call does (each script checks its own again, before its
# first write): chosen so that no call blocks Redis for more than ~10 ms on a queue of 1M
# jobs (measured by `python -m benchmarks bounds`, table in benchmarks/README.md).
MAX_COUNT = 250  # jobs per claim (which also promotes at most 100 due scheduled jobs)
MAX_BATCH = 250  # expired leases per reap / stalled sweep
MAX_ENQUEUE = 250  # jobs per enqueue_many call
MAX_HELD = 250  # (id, token) pairs per extend_locks / release call
MAX_BUDGET = 500  # jobs (or leftover keys) per drain / obliterate step
MAX_MS = 2**40  # a lease or delay of ~34 years; now + MAX_MS stays exact in a double
MAX_ATTEMPTS = 1_000_000  # handler failures a job may have; a sane bound, not arithmetic


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def positive_int(name: str, value: object, high: int | None = None) -> int:
    """``value`` if it is an int in [1, high], else InvalidArgument."""
    if not _is_int(value) or value <= 0 or (high is not None and value > high):  # type: ignore[operator]
        bound = f" <= {high}" if high is not None else ""
        raise InvalidArgument(f"{name} must be a positive int{bound}, not {value!r}")
    return value  # type: ignore[return-value]


def non_negative_int(name: str, value: object, high: int | None = None) -> int:
    """``value`` if it is an int in [0, high], else InvalidArgument."""
    if not _is_int(value) or value < 0 or (high is not None and value > high):  # type: ignore[operator]
        bound = f" <= {high}" if high is not None else ""
        raise InvalidArgument(f"{name} must be an int >= 0{bound}, not {value!r}")
    return value  # type: ignore[return-value]


def int_in(name: str, value: object, low: int, high: int) -> int:
    """``value`` if it is an int in [low, high], else InvalidArgument."""
    if not _is_int(value) or not low <= value <= high:  # type: ignore[operator]
        raise InvalidArgument(f"{name} must be an int in [{low}, {high}], not {value!r}")
    return value  # type: ignore[return-value]


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
