"""The durable-step verbs (docs/steps.md): read a job's steps, commit one, sleep.

Each gates its arguments before any I/O and runs one script (the read is one ``HSCAN`` of
the row, filtered on the server to its ``step:`` fields). A refusal changes nothing.
"""

from __future__ import annotations

from typing import Any

from .._model.steps import FIELD_PREFIX, StepRecord, check_name, field
from .._scripts import validate as v
from .._scripts.calls import Executor, ScriptCall, evaluate, script_call
from .._scripts.keyspace import keyspace
from .._scripts.replies import check_status

__all__ = ["commit_step", "commit_step_call", "read_steps", "sleep", "sleep_call"]


def commit_step_call(queue: str, job_id: str, token: int, record: StepRecord) -> ScriptCall[bool]:
    """Write ``record`` into the job's row; the reply is False when the row already holds
    a record of that name (nothing written)."""
    ks = keyspace(queue)
    name = check_name(record.name)
    data = v.payload_bytes(record.encode(), f"the result of step {name!r}")
    argv = [job_id, v.token_str(token), field(name), data]

    def read(reply: Any) -> bool:
        return check_status(reply, f"step {name!r} of {job_id}") == 1

    return script_call("commit_step", [ks.job(job_id), ks.active], argv, read)


async def commit_step(
    conn: Executor, queue: str, job_id: str, token: int, record: StepRecord
) -> bool:
    """Commit a step's record, fenced by the claim's ``token``.

    Returns:
        True when written; False when the row already held a record of that name.

    Raises:
        InvalidArgument: a bad name; PayloadTooLarge: a record over the payload limit
        (before any I/O). JobGone, StaleToken, NotActive: not the job's holder.
    """
    return await evaluate(conn, commit_step_call(queue, job_id, token, record))


def sleep_call(queue: str, job_id: str, token: int, name: str, ms: int) -> ScriptCall[int]:
    """Commit sleep step ``name`` and schedule the job ``ms`` from the server's now; the
    reply is the sleep's end (server ms), 1 when the step was already written, 0 when a
    cancel was requested (nothing written: the job ends cancelled)."""
    ks = keyspace(queue)
    check_name(name)
    argv = [job_id, v.token_str(token), field(name), v.positive_int("ms", ms, v.MAX_MS), ks.base]

    def read(reply: Any) -> int:
        if isinstance(reply, int) and reply >= 0:
            return reply
        check_status(reply, f"sleep {name!r} of {job_id}")
        raise AssertionError("unreachable: check_status raises for a refusal")

    keys = [ks.job(job_id), ks.active, ks.schedule]
    return script_call("sleep", keys, argv, read)


async def sleep(conn: Executor, queue: str, job_id: str, token: int, name: str, ms: int) -> int:
    """Move a held job to the schedule for ``ms``, its sleep step ``name`` committed;
    answers the sleep's end (server ms), 1 (the step was written before: nothing done) or
    0 (a cancel was requested: nothing done).

    Raises:
        InvalidArgument: a bad name or duration (before any I/O). JobGone, StaleToken,
        NotActive: not the job's holder.
    """
    return await evaluate(conn, sleep_call(queue, job_id, token, name, ms))


async def read_steps(conn: Executor, queue: str, job_id: str) -> dict[str, StepRecord]:
    """The job's committed steps by name (empty for a job with none, or no row)."""
    key = keyspace(queue).job(job_id)
    found: dict[str, StepRecord] = {}
    cursor: bytes | str | int = 0
    while True:
        cursor, flat = await conn.execute(
            "HSCAN", key, cursor, "MATCH", FIELD_PREFIX + "*", "COUNT", 1000
        )
        for i in range(0, len(flat), 2):
            raw = flat[i]
            name = (raw.decode() if isinstance(raw, bytes) else raw)[len(FIELD_PREFIX) :]
            data = flat[i + 1]
            found[name] = StepRecord.decode(
                name, data if isinstance(data, bytes) else data.encode()
            )
        if cursor in (0, b"0", "0"):
            return found
