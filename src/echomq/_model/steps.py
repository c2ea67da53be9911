"""Durable steps: the record a job's step leaves in its row, and the step's names.

Rule 1 (where): a step's record is a field of its job's row, ``step:<name>``, so it is kept
with the row's retention and deleted with it; nothing else holds it.
Rule 2 (the record): a one-line JSON header, a newline, then the step's value as the
queue's codec encoded it (a ``done`` step) or nothing (``failed``, ``sleep``). The header
carries the state, the fencing token of the run that wrote it, the run time in ms, when
it was committed, the
error text of a failed step, the end of a sleep (server ms).
Rule 3 (names): a step's name is 1 to :data:`MAX_STEP_NAME` characters with no control
character; within one run a name is used once (the worker refuses a second use).
Rule 4 (keys): :func:`step_key` is the same for every run of a job: an idempotency key for
the APIs a step calls.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from typing import Literal

import attrs

from ..errors import InvalidArgument

__all__ = ["FIELD_PREFIX", "MAX_STEP_NAME", "StepRecord", "check_name", "field", "step_key"]

FIELD_PREFIX = "step:"
MAX_STEP_NAME = 200

StepState = Literal["done", "failed", "sleep"]


def check_name(name: object) -> str:
    """``name`` when it is a usable step name (rule 3).

    Raises:
        InvalidArgument: not a str, empty, too long, or with a control character.
    """
    if type(name) is not str:
        raise InvalidArgument(f"a step name is a str, not {type(name).__name__}")
    if not name or len(name) > MAX_STEP_NAME:
        raise InvalidArgument(f"a step name has 1 to {MAX_STEP_NAME} characters: {name!r}")
    if any(unicodedata.category(c) == "Cc" for c in name):
        raise InvalidArgument(f"a step name has no control characters: {name!r}")
    return name


def field(name: str) -> str:
    """The row field that holds step ``name``'s record."""
    return FIELD_PREFIX + name


def step_key(queue: str, job_id: str, name: str) -> str:
    """Rule 4: a stable idempotency key for step ``name`` of a job (hex, 40 characters
    after the ``emq-`` prefix: short enough for the APIs that take one)."""
    digest = hashlib.sha256(f"{queue}\0{job_id}\0{name}".encode()).hexdigest()
    return f"emq-{digest[:40]}"


@attrs.frozen(kw_only=True)
class StepRecord:
    """One step's committed record (rule 2)."""

    name: str
    state: StepState
    token: int
    ms: float = 0.0  # the step's run time
    at_ms: int = 0  # when it was committed (the worker's wall clock; a sleep's: the server's)
    error: str | None = None  # a failed step's ``Type: message``
    until_ms: int | None = None  # a sleep's end, server ms
    value: bytes = b""  # a done step's value, encoded by the queue's codec

    def encode(self) -> bytes:
        """The field's value: header line, newline, value."""
        head: dict[str, object] = {
            "state": self.state,
            "token": self.token,
            "ms": self.ms,
            "at_ms": self.at_ms,
        }
        if self.error is not None:
            head["error"] = self.error
        return json.dumps(head, separators=(",", ":")).encode() + b"\n" + self.value

    @classmethod
    def decode(cls, name: str, data: bytes) -> StepRecord:
        """The record stored for step ``name``.

        Raises:
            ValueError: not a step record.
        """
        head, _, value = data.partition(b"\n")
        fields = json.loads(head)
        state = fields["state"]
        if state not in ("done", "failed", "sleep"):
            raise ValueError(f"step {name!r}: unknown state {state!r}")
        until = fields.get("until_ms")
        return cls(
            name=name,
            state=state,
            token=int(fields["token"]),
            ms=float(fields.get("ms", 0.0)),
            at_ms=int(fields.get("at_ms", 0)),
            error=fields.get("error"),
            until_ms=None if until is None else int(until),
            value=value,
        )
