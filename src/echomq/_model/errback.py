"""Error callbacks (docs/flows.md "Error callbacks"): the job a dying job's row names.

Rule 1 (the spec): a job with an errback carries it in its row field ``errback``: seven
lines (the errback's queue, id, priority, max_attempts, task, keep_result ms and keep_dead
ms, '' for none), then the codec's payload, any bytes (:func:`encode_spec`).
``include/link_error.lua`` reads it where the job dies and enqueues the errback, or, on
another queue, writes it to the dying job's queue's outbox for the relay.
Rule 2 (the call): the errback's payload is encoded with two stand-ins first (``""`` for
the failed job's id and its error); the script that enqueues it puts :data:`ERRBACK_MARK`,
a JSON object ``{"job", "error"}`` and a newline in front (:func:`errback_payload` is the
relay's twin of that), and the worker passes the two values in place of the stand-ins
(:func:`split_errback`).
"""

from __future__ import annotations

import json

from ..errors import InvalidArgument
from .job import NewJob

__all__ = ["ERRBACK_MARK", "encode_spec", "errback_payload", "split_errback"]

ERRBACK_MARK = b"\x00emq-errback\x00"


def _opt(value: int | None) -> str:
    return "" if value is None else str(value)


def encode_spec(queue: str, job: NewJob) -> bytes:
    """The row field ``errback`` for ``job`` (its id set) on ``queue`` (rule 1).

    Raises:
        InvalidArgument: a task name with a newline (the spec's lines could not be read).
    """
    assert job.job_id is not None
    payload = job.payload if isinstance(job.payload, bytes) else job.payload.encode()
    head = [
        queue,
        job.job_id,
        str(job.priority),
        str(job.max_attempts),
        job.task or "",
        _opt(job.keep_result_ms),
        _opt(job.keep_dead_ms),
    ]
    if any("\n" in line for line in head):
        raise InvalidArgument(f"an error callback's task name has no newline: {job.task!r:.80}")
    return ("\n".join(head) + "\n").encode() + payload


def decode_spec(spec: bytes) -> tuple[str, NewJob]:
    """The errback's queue and job from its spec, as the relay enqueues it.

    Raises:
        ValueError: not a spec.
    """
    parts = spec.split(b"\n", 7)
    if len(parts) != 8:
        raise ValueError("an errback spec has seven lines and a payload")
    queue, job_id, priority, attempts, task, keep_result, keep_dead = (
        p.decode() for p in parts[:7]
    )
    return queue, NewJob(
        payload=parts[7],
        job_id=job_id,
        priority=int(priority),
        max_attempts=int(attempts),
        task=task or None,
        keep_result_ms=int(keep_result) if keep_result else None,
        keep_dead_ms=int(keep_dead) if keep_dead else None,
    )


def errback_payload(failed: str, error: str, payload: bytes) -> bytes:
    """The payload an errback runs with (rule 2): the mark, who died and why, the call."""
    head = json.dumps({"job": failed, "error": error}, separators=(",", ":"))
    return ERRBACK_MARK + head.encode() + b"\n" + payload


def split_errback(payload: bytes) -> tuple[tuple[str, str] | None, bytes]:
    """``((failed job id, error), the codec's payload)`` of an errback's payload; ``(None,
    payload)`` for any other job."""
    if not payload.startswith(ERRBACK_MARK):
        return None, payload
    end = payload.index(b"\n", len(ERRBACK_MARK))
    head = json.loads(payload[len(ERRBACK_MARK) : end])
    return (str(head["job"]), str(head["error"])), payload[end + 1 :]
