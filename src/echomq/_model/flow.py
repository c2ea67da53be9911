"""Flows (docs/flows.md): a tree of parent and child jobs, as the verbs take it.

Rule 1: a parent's payload carries :data:`PARENT_MARK` in front of the codec's bytes, so
the worker knows, from the claim alone, that it must read its children's outcomes (a
queue without flows pays one ``bytes.startswith``). :func:`split_payload` takes it off.
Rule 2: a child's outcome is stored on its parent as one letter and its bytes:
``c`` completed (the encoded result), ``d`` dead (the error), ``x`` cancelled (the
reason), ``r`` removed.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

import attrs

from ..errors import ChildFailed
from .job import NewJob

__all__ = [
    "PARENT_MARK",
    "ChildFailure",
    "ChildOutcome",
    "Feed",
    "FlowJob",
    "Policy",
    "mark_parent",
    "split_payload",
]

PARENT_MARK = b"\x00emq-flow\x00"
# a group member in the middle of a chain: the previous step's encoded result travels in
# front of the codec's payload (length, newline, bytes); the worker passes it first
FED_MARK = b"\x00emq-fed\x00"


class Policy(enum.StrEnum):
    """What a parent does about a child that did not complete (dead, cancelled, removed)."""

    FAIL = "fail"  # the parent fails at once (it is made ready and dead-lettered)
    IGNORE = "ignore"  # the parent runs on the results of the children that completed
    CONTINUE = "continue"  # the parent runs; the failures are in its children's results


class Feed(enum.StrEnum):
    """How a parent's children's results reach its function."""

    NONE = "none"  # only through ``job.children_results()``
    ONE = "one"  # a chain step: its one child's result is its first argument
    ALL = "all"  # a chord callback: the list of results is its first argument


_STATES = {b"c": "completed", b"d": "dead", b"x": "cancelled", b"r": "removed"}


@attrs.frozen
class ChildOutcome:
    """A finished child as its parent recorded it: ``state`` (completed | dead |
    cancelled | removed) and ``data`` (the encoded result, the error or the reason)."""

    id: str
    state: str
    data: bytes

    @classmethod
    def read(cls, child_id: str, stored: bytes) -> ChildOutcome:
        return cls(child_id, _STATES.get(stored[:1], "dead"), stored[1:])


@attrs.frozen
class ChildFailure:
    """A child that did not complete, in a ``continue`` parent's children results."""

    id: str
    state: str
    error: str

    def __str__(self) -> str:
        return f"child {self.id} {self.state}" + (f": {self.error}" if self.error else "")


def _count(children: tuple[FlowJob, ...]) -> str:
    return f"<{len(children)} children>"


@attrs.frozen(kw_only=True, eq=False)
class FlowJob:
    """One node of a flow: its job (``job.job_id`` set), its queue, its children in order,
    and, when it has children, its failure policy and how their results reach it.

    Compared by identity and shown shallow (its children counted, not shown): a tree may
    be thousands of levels deep, and nothing walks it by recursion (docs/flows.md)."""

    job: NewJob
    queue: str
    children: tuple[FlowJob, ...] = attrs.field(default=(), repr=_count)
    policy: Policy = Policy.FAIL
    feed: Feed = Feed.NONE
    errback: bytes | None = None  # its error callback's spec (_model/errback.py)

    @property
    def id(self) -> str:
        assert self.job.job_id is not None
        return self.job.job_id


def fed_payload(value: bytes, payload: bytes) -> bytes:
    """A job's payload that carries ``value`` (an encoded result) as its first argument."""
    return FED_MARK + str(len(value)).encode() + b"\n" + value + payload


def split_fed(payload: bytes) -> tuple[bytes | None, bytes]:
    """``(the encoded first argument, the codec's payload)``; ``(None, payload)`` for a
    payload that carries none."""
    if not payload.startswith(FED_MARK):
        return None, payload
    start = len(FED_MARK)
    end = payload.index(b"\n", start)
    size = int(payload[start:end])
    return payload[end + 1 : end + 1 + size], payload[end + 1 + size :]


def mark_parent(payload: bytes) -> bytes:
    return PARENT_MARK + payload


def split_payload(payload: bytes) -> tuple[bool, bytes]:
    """(is a flow parent, the codec's payload)."""
    if payload.startswith(PARENT_MARK):
        return True, payload[len(PARENT_MARK) :]
    return False, payload


def children_values(
    outcomes: Sequence[ChildOutcome | None], policy: Policy, decode: Any
) -> list[Any]:
    """A parent's children's results as its policy says (docs/flows.md): under ``fail``
    a child that did not complete raises :class:`~echomq.errors.ChildFailed`; ``ignore``
    leaves it out; ``continue`` gives a :class:`ChildFailure` for it. An unfinished
    child (None) is left out.

    Raises:
        ChildFailed: policy ``fail`` and a child that did not complete.
        Exception: what ``decode`` raises for a result.
    """
    values: list[Any] = []
    for outcome in outcomes:
        if outcome is None:
            continue  # not finished: only a parent failed early by policy fail
        if outcome.state != "completed":
            if policy is Policy.FAIL:
                raise ChildFailed(str(value_or_failure(outcome, decode)))
            if policy is Policy.IGNORE:
                continue
        values.append(value_or_failure(outcome, decode))
    return values


def value_or_failure(outcome: ChildOutcome, decode: Any) -> Any:
    """The child's decoded result, or a :class:`ChildFailure` for one that did not complete."""
    if outcome.state == "completed":
        return decode(outcome.data) if outcome.data else None
    return ChildFailure(outcome.id, outcome.state, outcome.data.decode("utf-8", "replace"))
