"""Argument gates shared by the verbs: each raises InvalidArgument before any I/O."""

from __future__ import annotations

from ..errors import InvalidArgument, SerializationError

__all__ = ["positive_int", "non_negative_int", "int_in", "payload_bytes", "token_str"]

MAX_PRIORITY = 4095  # priority * 2^40 + seq must stay exact in a double score
MAX_COUNT = 1000


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def positive_int(name: str, value: object) -> int:
    if not _is_int(value) or value <= 0:  # type: ignore[operator]
        raise InvalidArgument(f"{name} must be a positive int, not {value!r}")
    return value  # type: ignore[return-value]


def non_negative_int(name: str, value: object) -> int:
    if not _is_int(value) or value < 0:  # type: ignore[operator]
        raise InvalidArgument(f"{name} must be an int >= 0, not {value!r}")
    return value  # type: ignore[return-value]


def int_in(name: str, value: object, low: int, high: int) -> int:
    if not _is_int(value) or not low <= value <= high:  # type: ignore[operator]
        raise InvalidArgument(f"{name} must be an int in [{low}, {high}], not {value!r}")
    return value  # type: ignore[return-value]


def token_str(value: object) -> str:
    """A fencing token (the row's attempts) as the scripts compare it."""
    return str(positive_int("token", value))


def payload_bytes(value: object, name: str = "payload") -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    raise SerializationError(f"{name} must be bytes or str, not {type(value).__name__}")
