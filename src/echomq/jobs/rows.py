"""The per-job verbs (docs/operations.md): reach into one row.

``update_data``, ``update_progress``, ``add_log``, ``get_job_logs``, ``remove_job``,
``reprocess_job`` and ``explain`` (which answers data, an :class:`Explanation`; the CLI
words it). Each gates its arguments before any I/O, runs one
script, and answers a value or raises a typed error; a refusal changes nothing. A missing
row is :class:`~echomq.errors.JobGone` for every one of them. The ``*_call`` builders do no
I/O, so ``echomq.sync`` can run them on redis-py.
"""

from __future__ import annotations

from typing import Any

import attrs

from .._model.job import JobInfo
from .._model.repeat import RepeatInfo
from .._model.states import TERMINAL_STATES, JobState
from .._model.steps import StepRecord
from .._scripts import validate as v
from .._scripts.calls import Executor, ScriptCall, evaluate, script_call
from .._scripts.keyspace import Keyspace, remote_queue
from .._scripts.replies import Code, check_status, text
from ..admin.workers import WorkerRecord
from ..errors import InvalidArgument, RepeatFormatError, RepeatNotFound, ScriptError
from .steps import read_steps

__all__ = [
    "Explanation",
    "LaneFacts",
    "OpenChild",
    "RateWindow",
    "explain",
    "add_log",
    "get_job_logs",
    "remove_job",
    "reprocess_job",
    "update_data",
    "update_progress",
]

MAX_LOG_LINE = 64 * 1024  # bytes; a log line is a line, not a blob


# -- builders (no I/O) ---------------------------------------------------------------------


def _status(what: str) -> Any:
    def read(reply: Any) -> None:
        check_status(reply, what)

    return read


def progress_text(progress: object) -> str:
    """The stored form of a progress value: a str as is, a number as its decimal text."""
    if isinstance(progress, bool) or not isinstance(progress, str | int | float):
        raise InvalidArgument(f"progress must be a str, int or float, not {progress!r}")
    if isinstance(progress, float) and progress != progress:  # NaN
        raise InvalidArgument("progress must not be NaN")
    return progress if isinstance(progress, str) else str(progress)


def update_data_call(queue: str, job_id: str, payload: bytes | str) -> ScriptCall[None]:
    ks = Keyspace(queue)
    keys = [ks.job(job_id)]
    return script_call(
        "update_data", keys, [v.payload_bytes(payload)], _status(f"update_data {job_id}")
    )


def update_progress_call(queue: str, job_id: str, progress: str | int | float) -> ScriptCall[None]:
    ks = Keyspace(queue)
    keys = [ks.job(job_id)]
    argv = [progress_text(progress), job_id, ks.base]
    return script_call("update_progress", keys, argv, _status(f"update_progress {job_id}"))


def add_log_call(queue: str, job_id: str, line: str, *, keep: int | None = None) -> ScriptCall[int]:
    ks = Keyspace(queue)
    keys = [ks.job(job_id), ks.logs(job_id), ks.meta]
    if not isinstance(line, str):
        raise InvalidArgument(f"a log line must be a str, not {type(line).__name__}")
    data = line.encode()
    if len(data) > MAX_LOG_LINE:
        raise InvalidArgument(f"a log line is at most {MAX_LOG_LINE} bytes, not {len(data)}")
    keep_n = 0 if keep is None else v.positive_int("keep", keep)

    def read(reply: Any) -> int:
        if isinstance(reply, int) and reply >= 0:
            return reply
        check_status(reply, f"add_log {job_id}")
        raise ScriptError(f"add_log {job_id}: unexpected reply {reply!r}")

    return script_call("add_log", keys, [data, keep_n], read)


def get_job_logs_call(queue: str, job_id: str) -> ScriptCall[list[str]]:
    ks = Keyspace(queue)

    def read(reply: Any) -> list[str]:
        if isinstance(reply, list):
            return [text(line) for line in reply]
        check_status(reply, f"get_job_logs {job_id}")
        raise ScriptError(f"get_job_logs {job_id}: unexpected reply {reply!r}")

    return script_call("get_job_logs", [ks.job(job_id), ks.logs(job_id)], [], read)


def remove_job_call(queue: str, job_id: str, *, force: bool = False) -> ScriptCall[None]:
    """``force``: remove a flow parent whose children are open too (its row only:
    ``flows.remove_flow`` removes the subtree)."""
    ks = Keyspace(queue)
    keys = [
        ks.job(job_id),
        ks.lock(job_id),
        ks.logs(job_id),
        ks.pending,
        ks.schedule,
        ks.active,
        ks.dead,
        ks.completed,
        ks.waiting,
    ]
    argv = [job_id, ks.base, "1" if force else "0"]
    return script_call("remove_job", keys, argv, _status(f"remove_job {job_id}"))


def reprocess_job_call(queue: str, job_id: str) -> ScriptCall[None]:
    ks = Keyspace(queue)
    keys = [ks.job(job_id), ks.dead, ks.pending, ks.wake, ks.logs(job_id)]
    return script_call("reprocess_job", keys, [job_id, ks.base], _status(f"reprocess_job {job_id}"))


# -- explain -----------------------------------------------------------------------------------

_STATE_SETS = ("pending", "schedule", "active", "dead", "completed", "waiting", "cancelled")
_EXPECTED_SET = {
    JobState.PENDING: "pending",
    JobState.SCHEDULED: "schedule",
    JobState.ACTIVE: "active",
    JobState.DEAD: "dead",
    JobState.COMPLETED: "completed",
    JobState.CANCELLED: "cancelled",
    JobState.WAITING: "waiting",
    JobState.EXPIRED: "dead",  # kept in the dead index (its retention: keep_dead)
}


@attrs.frozen(kw_only=True)
class RateWindow:
    """A rate limit's current window: ``used`` of ``max_jobs`` started per ``period_ms``;
    ``reopens_in_ms``: when the window ends (None: no window open)."""

    max_jobs: int
    period_ms: int
    used: int
    reopens_in_ms: int | None

    @property
    def full(self) -> bool:
        return self.used >= self.max_jobs


@attrs.frozen(kw_only=True)
class LaneFacts:
    """A grouped job's lane (docs/lanes.md): its place there and its group's standing.

    ``limit`` is the group's concurrency limit (its own, else the queue's default; None:
    no limit); ``in_ring``: the group has a turn in the claim's round robin;
    ``limited_until_ms``: the group waits for its rate window (server clock).
    """

    group: str
    position: int | None  # 0-based in the lane (None: not in it)
    waiting: int
    active: int
    limit: int | None
    in_ring: bool
    limited_until_ms: int | None
    rate: RateWindow | None

    @property
    def at_limit(self) -> bool:
        return self.limit is not None and self.active >= self.limit


@attrs.frozen(kw_only=True)
class OpenChild:
    """A child a flow parent still waits for (docs/flows.md): its queue (the parent's,
    or another: ``remote``) and its row's state there (None: no row, e.g. removed, or a
    child on another queue not written yet). A remote child that finished but whose
    outcome has not reached the parent yet (it is on its way through its queue's outbox)
    is ``finished`` while the parent still counts it open."""

    id: str
    queue: str
    remote: bool
    state: str | None

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL_STATES


@attrs.frozen(kw_only=True)
class Explanation:
    """Why a job is (not) running: every fact that decides it, read atomically.

    Times are server-clock milliseconds. ``position`` is 0-based in the pending order.
    A grouped job has ``lane`` (its place in its group's lane, the group's standing); a
    queue with a rate limit has ``queue_rate``.
    This is data; the sentences for people are the CLI's (``echomq.cli.explain_text``:
    ``summary(e)``, ``facts(e)``), so a surface words it without this layer knowing.
    """

    job: JobInfo
    sets: tuple[str, ...]  # the state sets that hold the id (normally exactly one)
    paused: bool
    position: int | None
    pending_count: int
    lease_deadline_ms: int | None
    run_at_ms: int | None
    run_id: str
    now_ms: int
    locked: bool
    # the repeatable whose run this job is, as registered now (None: not a repeat run, or
    # its record is gone or of another layout version); its upcoming slots, docs/repeat.md
    repeat: RepeatInfo | None = None
    # the worker that claimed it last (the row's `worker`) and its heartbeat record: None
    # when the row names none; a record with ``alive`` False when it has stopped beating
    holder: WorkerRecord | None = None
    lane: LaneFacts | None = None
    queue_rate: RateWindow | None = None
    # the queue's concurrency across its workers (None: no cap) and its jobs in active
    # (read only with a cap); a back-off's end (a task raised RateLimited; server ms)
    concurrency: int | None = None
    running: int = 0
    blocked_until_ms: int | None = None
    # a flow (docs/flows.md): the parent's id and its queue when that is another one; a
    # parent's children counts and (at most 10 of) the ids it still waits for, each with
    # its queue and state (a child on another queue read there)
    parent: str | None = None
    parent_queue: str | None = None
    children: int = 0
    open_children: int = 0
    failed_children: int = 0
    held: bool = False
    open_ids: tuple[str, ...] = ()
    waiting_for: tuple[OpenChild, ...] = ()
    # its durable steps (docs/steps.md), in the order they were committed
    steps: tuple[StepRecord, ...] = ()

    @property
    def state(self) -> JobState:
        return self.job.state

    @property
    def token(self) -> int:
        """The fencing token: the row's ``token`` (grows at every claim)."""
        return self.job.token

    @property
    def lease_remaining_ms(self) -> int | None:
        if self.lease_deadline_ms is None:
            return None
        return self.lease_deadline_ms - self.now_ms

    @property
    def epoch_current(self) -> bool | None:
        """Whether the lease was stamped by the server's current run (None: never claimed)."""
        if self.job.lease_epoch is None:
            return None
        return self.job.lease_epoch == self.run_id

    @property
    def expected_set(self) -> str:
        """The state set the row's state says should hold the id."""
        return _EXPECTED_SET[self.job.state]

    @property
    def consistent(self) -> bool:
        """Whether exactly the expected set holds the id."""
        return self.sets == (self.expected_set,)


def explain_call(queue: str, job_id: str) -> ScriptCall[Explanation]:
    ks = Keyspace(queue)
    keys = [
        ks.job(job_id),
        ks.pending,
        ks.schedule,
        ks.active,
        ks.dead,
        ks.completed,
        ks.meta,
        ks.lock(job_id),
        ks.workers,
        ks.waiting,
        ks.children(job_id),
        ks.child_results(job_id),
        ks.remote_children(job_id),
    ]

    def read(reply: Any) -> Explanation:
        if reply == Code.GONE:
            check_status(reply, f"explain {job_id}")
        if not isinstance(reply, list) or len(reply) != 20 or not isinstance(reply[0], list):
            raise ScriptError(f"explain {job_id}: unexpected reply {reply!r}")
        flat = reply[0]
        row = dict(zip(flat[::2], flat[1::2], strict=True))
        try:
            info = JobInfo.from_row(job_id, row)
        except (KeyError, ValueError) as exc:
            raise ScriptError(f"explain {job_id}: the row is malformed ({exc!r})") from None
        lane = _lane(info.group, reply[13], int(reply[9]))
        in_lane = lane is not None and lane.position is not None
        pending = reply[1] if not in_lane else 0
        scores = dict(zip(_STATE_SETS, [pending, *reply[3:7], reply[15], reply[18]], strict=True))
        lock_field = b"lock" in row

        holder = None
        if info.worker is not None:
            beat = ms(reply[12])
            record = reply[11] if isinstance(reply[11], list) else []
            if record or beat is not None:
                holder = WorkerRecord.from_record(info.worker, beat or 0, record)
        return Explanation(
            job=info,
            sets=tuple(name for name, score in scores.items() if score is not None),
            paused=bool(reply[7]),
            position=None if reply[1] is None else int(reply[1]),
            pending_count=int(reply[2]),
            lease_deadline_ms=ms(reply[4]),
            run_at_ms=ms(reply[3]),
            run_id=text(reply[8]),
            now_ms=int(reply[9]),
            locked=bool(reply[10]) or lock_field,
            holder=holder,
            lane=lane,
            queue_rate=_window(reply[14]),
            concurrency=None if not reply[19][0] else int(reply[19][0]),
            running=int(reply[19][1]),
            blocked_until_ms=ms(reply[19][2]) if reply[19][2] else None,
            parent=text(row[b"parent"]) if b"parent" in row else None,
            parent_queue=text(row[b"parent_queue"]) if b"parent_queue" in row else None,
            children=int(row.get(b"kids", 0)),
            open_children=int(row.get(b"open", 0)) - (1 if b"held" in row else 0),
            failed_children=int(row.get(b"failed", 0)),
            held=b"held" in row,
            open_ids=tuple(text(i) for i in reply[16]),
            waiting_for=tuple(
                OpenChild(
                    id=text(child),
                    queue=queue if where is None else remote_queue(where),
                    remote=where is not None,
                    state=None if state is None else text(state),
                )
                for child, (where, state) in zip(reply[16], reply[17], strict=True)
            ),
        )

    return script_call("explain", keys, [job_id, ks.base], read)


def ms(value: Any) -> int | None:
    return None if value is None else int(float(value))


def _window(reply: Any) -> RateWindow | None:
    if not reply:
        return None
    max_jobs, period, used, ttl = reply
    return RateWindow(
        max_jobs=int(max_jobs),
        period_ms=int(period),
        used=int(used),
        reopens_in_ms=int(ttl) if int(used) > 0 and int(ttl) >= 0 else None,
    )


def _lane(group: str | None, reply: Any, now: int) -> LaneFacts | None:
    if group is None or not reply:
        return None
    position, waiting, active, limit, in_ring, until, rate_max, rate_ms, used = reply
    limited = ms(until)
    rate = None
    if rate_max is not None:
        reopens = limited - now if limited is not None and limited > now else None
        rate = RateWindow(
            max_jobs=int(rate_max), period_ms=int(rate_ms), used=int(used), reopens_in_ms=reopens
        )
    return LaneFacts(
        group=group,
        position=None if position is None else int(position),
        waiting=int(waiting),
        active=int(active),
        limit=None if limit is None else int(limit),
        in_ring=bool(in_ring),
        limited_until_ms=limited,
        rate=rate,
    )


async def _remote_states(conn: Executor, kids: tuple[OpenChild, ...]) -> tuple[OpenChild, ...]:
    """The open children on other queues read there (another slot: outside the script;
    explain is a view, each read is of its moment)."""
    out = []
    for child in kids:
        if child.remote:
            state = await conn.execute("HGET", Keyspace(child.queue).job(child.id), "state")
            child = attrs.evolve(child, state=None if state is None else text(state))
        out.append(child)
    return tuple(out)


# -- verbs ------------------------------------------------------------------------------------


async def update_data(conn: Executor, queue: str, job_id: str, payload: bytes | str) -> None:
    """Replace the job's payload (whatever its state; a running handler keeps its copy).

    Raises:
        InvalidKey, SerializationError: before any I/O. JobGone: no row; nothing written.
    """
    await evaluate(conn, update_data_call(queue, job_id, payload))


async def update_progress(
    conn: Executor, queue: str, job_id: str, progress: str | int | float
) -> None:
    """Write the row's ``progress`` and publish ``{"event": "progress", ...}``.

    A number is stored as its decimal text; the event carries the stored text.

    Raises:
        InvalidKey, InvalidArgument: before any I/O. JobGone: no row; nothing written.
    """
    await evaluate(conn, update_progress_call(queue, job_id, progress))


async def add_log(
    conn: Executor, queue: str, job_id: str, line: str, *, keep: int | None = None
) -> int:
    """Append ``line`` to the job's logs, keeping the last ``keep`` lines (default: the
    queue's ``max_log_lines``, 1,000 unless ``admin.set_retention`` says otherwise).

    Answers the number of lines kept. The lines end with their job: a finished job's logs
    expire with its row (docs/results.md).

    Raises:
        InvalidKey, InvalidArgument: before any I/O. JobGone: no row; nothing written.
    """
    return await evaluate(conn, add_log_call(queue, job_id, line, keep=keep))


async def get_job_logs(conn: Executor, queue: str, job_id: str) -> list[str]:
    """The job's log lines in append order (``[]`` when none).

    Raises:
        InvalidKey: before any I/O. JobGone: no row.
    """
    return await evaluate(conn, get_job_logs_call(queue, job_id))


async def remove_job(conn: Executor, queue: str, job_id: str, *, force: bool = False) -> None:
    """Remove the job from whichever set holds it (active included), with its row and logs.

    A worker still running a removed job finds its row gone when it settles (``JobGone``).
    A live flow child tells its parent it is gone (docs/flows.md). A flow parent waiting
    for open children is refused unless ``force`` (which removes its row only; use
    ``flows.remove_flow`` for the subtree).

    Raises:
        InvalidKey: before any I/O.
        JobGone: no row.
        JobLocked: the job has an operator lock (a ``:lock`` key or a ``lock`` field);
            nothing changed.
        HasOpenChildren: a waiting flow parent, not forced; nothing changed.
    """
    await evaluate(conn, remove_job_call(queue, job_id, force=force))


async def reprocess_job(conn: Executor, queue: str, job_id: str) -> None:
    """Move a dead job back to pending, first in its priority band, and wake a worker.

    ``last_error`` is cleared; ``token``, ``failures`` and ``stalled`` stay. The pause
    gate is not read: on a paused queue the job waits in pending until resume.

    Raises:
        InvalidKey: before any I/O. JobGone: no row. NotDead: not in the dead set.
    """
    await evaluate(conn, reprocess_job_call(queue, job_id))


async def explain(conn: Executor, queue: str, job_id: str) -> Explanation:
    """Why is this job not running? Its state, lease deadline and epoch, fencing token,
    stalls, failures, next run time, the pause gate and its place in pending, read in one
    atomic script. ``echomq.cli.explain_text.summary(e)`` says it in one line and
    ``facts(e)`` lists it. A repeat run also answers its repeatable's record (a second
    read: ``e.repeat``, with its upcoming slots).

    Raises:
        InvalidKey: before any I/O. JobGone: no row.
    """
    e = await evaluate(conn, explain_call(queue, job_id))
    steps = await read_steps(conn, queue, job_id)
    if steps:
        ordered = sorted(steps.values(), key=lambda r: (r.at_ms, r.name))
        e = attrs.evolve(e, steps=tuple(ordered))
    if any(c.remote for c in e.waiting_for):
        e = attrs.evolve(e, waiting_for=await _remote_states(conn, e.waiting_for))
    if e.job.repeat is None:
        return e
    from ..repeat import get

    try:
        info = await get(conn, queue, e.job.repeat)
    except (RepeatNotFound, RepeatFormatError):
        return e
    return attrs.evolve(e, repeat=info)
