"""The lifecycle verbs: enqueue, claim, complete, fail, rate_limited, extend, release, reap,
get_job.

Each verb gates its arguments (before any I/O), builds a :class:`ScriptCall` with a plain
``*_call`` function, runs it on the trio wire, and reads the reply into a value or a typed
error. ``echomq.sync`` runs the same ``*_call`` builders on redis-py.
"""

from __future__ import annotations

import functools
import os
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from operator import itemgetter
from typing import Any, Literal, NamedTuple, TypeAlias

import attrs

from .._model.job import Claimed, Enqueued, JobInfo, NewJob, Sweep, check_dedup_mode
from .._model.options import MAX_EPOCH_MS
from .._scripts import validate as v
from .._scripts.calls import (
    Executor,
    ScriptCall,
    evaluate,
    evaluate_packed,
    packed_call,
    script_call,
)
from .._scripts.keyspace import Keyspace, check_dedup_key, check_group, check_id, keyspace
from .._scripts.loader import ENQUEUE_SET_FIELDS
from .._scripts.replies import (
    COMPLETE_RESULTS,
    EXTEND_RESULTS,
    CompleteResult,
    ExtendResult,
    check_status,
    text,
)
from .._wire.connection import CommandHead, Connection
from ..errors import InvalidArgument, ScriptError

__all__ = [
    "DEFAULT_MAX_RECOVERIES",
    "ClaimBatch",
    "ExtendAnswers",
    "claim_batch",
    "Claimed",
    "Enqueued",
    "Answer",
    "GatedJob",
    "CompleteResult",
    "ExtendResult",
    "FailOutcome",
    "JobInfo",
    "NewJob",
    "claim",
    "complete",
    "complete_many",
    "enqueue",
    "enqueue_batch",
    "enqueue_call",
    "enqueue_gated_call",
    "enqueue_lone",
    "gate_job",
    "enqueue_many",
    "expires_arg",
    "extend_lock",
    "extend_locks",
    "fail",
    "get_job",
    "rate_limited",
    "rate_limited_call",
    "get_job_args",
    "new_id",
    "read_job",
    "reap",
    "reap_counted",
    "release",
]

FailOutcome = Literal["retrying", "dead"]
DEFAULT_MAX_RECOVERIES = 1  # the worker's reap mode: recovered once, dead at the next stall
NO_COUNT = -1  # reap_call's max_recoveries for the contract's uncounted reap
MAX_TASK_NAME = 1024  # bytes of a task name stored on the row


def new_id() -> str:
    """A fresh job id: 32 hex characters (128 random bits from ``os.urandom``, as a uuid4
    carries 122).

    Bulk enqueues make one per job, so the bits are drawn ``_ID_DRAW`` ids at a time (one
    ``getrandom`` call instead of one each) into a pool that ``popleft`` hands out: each
    id once, whatever the threads; a forked child empties its copy (it would hand out the
    parent's next ids).
    """
    while True:
        try:
            return _IDS.popleft()
        except IndexError:  # (other threads may take the new ones first: draw again)
            data = os.urandom(16 * _ID_DRAW).hex()
            _IDS.extend([data[i : i + 32] for i in range(0, len(data), 32)])


_ID_DRAW = 64
_IDS: deque[str] = deque()
os.register_at_fork(after_in_child=_IDS.clear)


# -- builders (no I/O) ---------------------------------------------------------------------


class GatedJob(NamedTuple):
    """One job gated for ``enqueue.lua`` (:func:`gate_job`): its id, its payload bytes, and
    its option set (the values of ``_SET_BUILT``, in that order: jobs of a call with equal
    sets share one)."""

    id: str
    payload: bytes
    options: tuple[Any, ...]


# an option set as gate_job builds it, field by field; enqueue.lua's SET_FIELDS
# (loader.ENQUEUE_SET_FIELDS) is the order the fields are sent in: when the two differ,
# _SET_SENT reorders a set once per distinct set of a call (_enqueue_argv)
_SET_BUILT = (
    "delay_ms", "priority", "max_attempts", "task", "keep_result", "keep_dead", "dedup",
    "dedup_ms", "dedup_mode", "group", "group_concurrency", "headers", "expires",
)  # fmt: skip
# a dedup mode as sent: '' (throttle), 'f' (until finished), 'd' (debounce)
_DEDUP_SENT = {"throttle": "", "until_finished": "f", "debounce": "d"}
if sorted(_SET_BUILT) != sorted(ENQUEUE_SET_FIELDS):
    raise RuntimeError(f"enqueue.lua's SET_FIELDS {ENQUEUE_SET_FIELDS} are not {_SET_BUILT}")
_SET_SENT = (
    None
    if _SET_BUILT == ENQUEUE_SET_FIELDS
    else itemgetter(*map(_SET_BUILT.index, ENQUEUE_SET_FIELDS))
)

#: a job's answer from :func:`enqueue_gated_call`: None when it was written with the id it
#: was sent with (no value made per job), else an :class:`Enqueued` (deduplicated: the
#: holder's id)
Answer: TypeAlias = Enqueued | None


# task names already checked (a producer enqueues a few tasks again and again)
_TASK_NAMES: set[str] = set()
_TASK_NAMES_MAX = 1024


def _task_name(name: object) -> str:
    if type(name) is str and name in _TASK_NAMES:
        return name
    if not isinstance(name, str) or not name or len(name.encode()) > MAX_TASK_NAME:
        raise InvalidArgument(
            f"a task name must be a non-empty str of at most {MAX_TASK_NAME} bytes, "
            f"not {name!r:.80}"
        )
    if type(name) is str:
        if len(_TASK_NAMES) >= _TASK_NAMES_MAX:
            _TASK_NAMES.clear()
        _TASK_NAMES.add(name)
    return name


def gate_job(job: object) -> GatedJob:
    """One job of an ``enqueue.lua`` call, gated before any I/O: its id, its payload (for
    the batch's byte cap) and its option set (:func:`enqueue_gated_call`).

    The common values (an exact int in range) pass an inline check; anything else goes
    through the ``validate`` gate, which answers it or raises its error (in field order).

    Raises:
        InvalidArgument, InvalidKey, SerializationError, PayloadTooLarge: a bad field.
    """
    if type(job) is not NewJob and not isinstance(job, NewJob):
        raise InvalidArgument(f"enqueue_many takes NewJob values, not {type(job).__name__}")
    job_id = check_id(job.job_id) if job.job_id is not None else new_id()
    payload = v.payload_bytes(job.payload)
    dedup, dedup_ms, mode = "", 0, ""
    if job.dedup is not None:
        dedup = check_dedup_key(job.dedup)
        mode = _DEDUP_SENT[check_dedup_mode(job.dedup_mode)]
        if mode != "f" or job.dedup_ms:
            dedup_ms = v.positive_int("dedup_ms", job.dedup_ms, v.MAX_MS)
    delay, priority, attempts = job.delay_ms, job.priority, job.max_attempts
    if not (type(delay) is int and 0 <= delay <= v.MAX_MS):
        delay = v.non_negative_int("delay_ms", delay, v.MAX_MS)
    if not (type(priority) is int and -v.MAX_PRIORITY <= priority <= v.MAX_PRIORITY):
        priority = v.int_in("priority", priority, -v.MAX_PRIORITY, v.MAX_PRIORITY)
    if not (type(attempts) is int and 0 < attempts <= v.MAX_ATTEMPTS):
        attempts = v.positive_int("max_attempts", attempts, v.MAX_ATTEMPTS)
    keep_result, keep_dead = job.keep_result_ms, job.keep_dead_ms
    options = (  # in _SET_BUILT's order
        delay,
        priority,
        attempts,
        "" if job.task is None else _task_name(job.task),
        "" if keep_result is None else v.non_negative_int("keep_result_ms", keep_result, v.MAX_MS),
        "" if keep_dead is None else v.non_negative_int("keep_dead_ms", keep_dead, v.MAX_MS),
        dedup,
        dedup_ms,
        mode,
        "" if job.group is None else check_group(job.group),
        0 if job.group_concurrency is None else _group_concurrency(job),
        v.text_arg("headers", job.headers) if job.headers else "",
        "" if job.expires_ms is None and job.expires_at_ms is None else expires_arg(job),
    )
    return GatedJob(job_id, payload, options)


def expires_arg(job: NewJob) -> str:
    """A job's deadline as ``enqueue.lua`` / ``add_flow.lua`` take it (include/expiry.lua):
    ``''`` none, ``'<ms>'`` that many ms after the enqueue, ``'@<ms>'`` an epoch ms.

    Raises:
        InvalidArgument: both given, a relative one not 1..MAX_MS, an absolute one
            negative or past 2^53.
    """
    relative, absolute = job.expires_ms, job.expires_at_ms
    if relative is None and absolute is None:
        return ""
    if relative is not None and absolute is not None:
        raise InvalidArgument("give expires_ms or expires_at_ms, not both")
    if relative is not None:
        return str(v.positive_int("expires_ms", relative, v.MAX_MS))
    return "@" + str(v.non_negative_int("expires_at_ms", absolute, MAX_EPOCH_MS))


def _check_batch_size(n: int) -> None:
    if not n:
        raise InvalidArgument("enqueue_many needs a non-empty sequence of NewJob")
    if n > v.MAX_ENQUEUE:
        raise InvalidArgument(f"enqueue_many takes at most {v.MAX_ENQUEUE} jobs per call, not {n}")


def _enqueue_argv(base: str, jobs: Sequence[GatedJob]) -> tuple[list[Any], list[str]]:
    """``enqueue.lua``'s argv for ``jobs`` (the base, n, m, the m distinct option sets in
    the order of its ``SET_FIELDS``, then id, payload and set number per job) and the ids.

    Raises:
        InvalidArgument: no job, or more than ``MAX_ENQUEUE``; PayloadTooLarge: the
            payloads add up past ``config.MAX_BATCH_BYTES`` (``validate.batch_bytes``).
    """
    _check_batch_size(len(jobs))
    ids: list[str] = []
    sets: dict[tuple[Any, ...], str] = {}
    per_job: list[Any] = []
    total = 0
    last: tuple[Any, ...] | None = None
    number = ""
    for job_id, payload, options in jobs:
        ids.append(job_id)
        total += len(payload)
        if options != last:  # a bulk's jobs mostly share one option set
            last = options
            number = sets.get(options) or sets.setdefault(options, str(len(sets) + 1))
        per_job += (job_id, payload, number)
    v.batch_bytes(total)
    argv: list[Any] = [base, len(jobs), len(sets)]
    for options in sets:
        argv += options if _SET_SENT is None else _SET_SENT(options)
    argv += per_job
    return argv, ids


def _enqueue_keys(ks: Keyspace) -> tuple[str, ...]:
    """``enqueue.lua``'s keys (made once per queue: a producer enqueues one job per call)."""
    keys = _ENQUEUE_KEYS.get(ks.queue)
    if keys is None:
        if len(_ENQUEUE_KEYS) >= _ENQUEUE_KEYS_MAX:
            _ENQUEUE_KEYS.clear()
        keys = _ENQUEUE_KEYS[ks.queue] = (ks.pending, ks.schedule, ks.meta, ks.wake)
    return keys


_ENQUEUE_KEYS: dict[str, tuple[str, ...]] = {}
_ENQUEUE_KEYS_MAX = 1024


def enqueue_gated_call(queue: str, jobs: Sequence[GatedJob]) -> ScriptCall[list[Answer]]:
    """Enqueue jobs gated by :func:`gate_job` in one script call; answer one :data:`Answer`
    per job, in order: None for a job written with the id it was sent with (``jobs[i].id``),
    an :class:`Enqueued` for a deduplicated one (its dedup key is held: the holder's id).

    Raises:
        as :func:`_enqueue_argv`.
    """
    ks = keyspace(queue)
    if len(jobs) == 1:  # a lone delay(): _enqueue_argv's argv, without its table of sets
        job_id, payload, options = jobs[0]
        v.batch_bytes(len(payload))
        argv: list[Any] = [ks.base, 1, 1]
        argv += options if _SET_SENT is None else _SET_SENT(options)
        argv += (job_id, payload, "1")
        return script_call("enqueue", _enqueue_keys(ks), argv, _read_lone)
    argv, ids = _enqueue_argv(ks.base, jobs)
    n = len(ids)

    def read(reply: Any) -> list[Answer]:
        if reply == n:
            return [None] * n
        if not isinstance(reply, list) or len(reply) != n:
            raise ScriptError(f"enqueue: unexpected reply {reply!r}")
        return [
            None if answer == 1 else Enqueued(id=text(answer), deduplicated=True)
            for answer in reply
        ]

    return script_call("enqueue", _enqueue_keys(ks), argv, read)


async def enqueue_lone(conn: Connection, queue: str, job: GatedJob) -> Answer:
    """:func:`enqueue_gated_call` of the one job ``job`` on one server's trio wire (a lone
    ``delay()``), its :data:`Answer`. The call's ``EVALSHA``, keys and option set are
    packed once per queue and option set (a ``CommandHead``, for the first
    ``_LONE_SETS`` sets of a queue: sets that differ call by call, a dedup key or a trace
    context of each job's own, go the whole way every time): a call packs its id and
    payload only, and makes no :class:`ScriptCall` unless the script must be loaded.

    Raises:
        as :func:`enqueue_gated_call`; then what the call raises.
    """
    job_id, payload, options = job
    heads = _LONE_HEADS.get(queue)
    head = heads.get(options) if heads is not None else None
    if head is None:
        sc = enqueue_gated_call(queue, [job])  # (gates the job, as every call does)
        if heads is None:
            if len(_LONE_HEADS) >= _LONE_QUEUES:
                _LONE_HEADS.clear()
            heads = _LONE_HEADS[queue] = {}
        if len(heads) < _LONE_SETS:
            heads[options] = CommandHead(sc.evalsha_args()[:-3], 3)  # (tail: id, payload, "1")
        (answer,) = await evaluate(conn, sc)
        return answer
    v.batch_bytes(len(payload))
    packed = head.pack(job_id.encode(), payload, b"1")
    return await evaluate_packed(conn, packed, _read_one, lambda: enqueue_gated_call(queue, [job]))


# queue -> option set -> the head of its lone enqueue (a producer has a few option sets)
_LONE_HEADS: dict[str, dict[tuple[Any, ...], CommandHead]] = {}
_LONE_QUEUES = 1024
_LONE_SETS = 64


def _read_one(reply: Any) -> Answer:
    """A lone enqueue's reply (:func:`enqueue_lone`)."""
    if reply == 1:
        return None
    (answer,) = _read_lone(reply)
    return answer


def _read_lone(reply: Any) -> list[Answer]:
    """The reply of :func:`enqueue_gated_call` for one job (no closure made per call)."""
    if reply == 1:
        return [None]
    if not isinstance(reply, list) or len(reply) != 1:
        raise ScriptError(f"enqueue: unexpected reply {reply!r}")
    answer = reply[0]
    return [None if answer == 1 else Enqueued(id=text(answer), deduplicated=True)]


def _gated(queue: str, jobs: Sequence[NewJob]) -> list[GatedJob]:
    keyspace(queue)  # a bad queue name first, before any job is gated
    if isinstance(jobs, NewJob):
        raise InvalidArgument("enqueue_many needs a non-empty sequence of NewJob")
    _check_batch_size(len(jobs))
    return [gate_job(job) for job in jobs]


def enqueue_call(queue: str, jobs: Sequence[NewJob]) -> ScriptCall[list[str]]:
    """Enqueue ``jobs`` in one script call; answer their ids in order (a deduplicated job:
    the holder's). The contract's builder (``jobs.enqueue``, ``enqueue_many``, a repeat
    run's enqueue with its tail)."""
    groups = _gated(queue, jobs)
    ks = keyspace(queue)
    argv, ids = _enqueue_argv(ks.base, groups)

    def read(reply: Any) -> list[str]:
        if reply == len(ids):  # every job written: the ids as sent (a copy: the caller's)
            return ids[:]
        if not isinstance(reply, list) or len(reply) != len(ids):
            raise ScriptError(f"enqueue: unexpected reply {reply!r}")
        return [
            job_id if answer == 1 else text(answer)
            for job_id, answer in zip(ids, reply, strict=True)
        ]

    return script_call("enqueue", _enqueue_keys(ks), argv, read)


def _group_concurrency(job: NewJob) -> int:
    if job.group_concurrency is None:
        return 0
    if job.group is None:
        raise InvalidArgument("group_concurrency needs a group")
    return v.positive_int("group_concurrency", job.group_concurrency, v.MAX_LIMIT)


@attrs.frozen(kw_only=True)
class ClaimBatch:
    """What one claim answered: the jobs, and (when it took fewer than asked) how long
    until more work may be claimable: ``next_due_ms``, the earliest of the next scheduled
    job's due time and a rate window's reopening (0: now; None: nothing known, or the batch
    was full, or the queue is paused). A queue at its rate limit answers no jobs and the
    ms until its window reopens (docs/lanes.md)."""

    jobs: list[Claimed]
    next_due_ms: int | None


def _claimed(reply: Any) -> list[Claimed]:
    """The jobs of a claim's reply: 6 fields per job (then, maybe, next_due_ms)."""
    if not isinstance(reply, list) or len(reply) % 6 > 1:
        raise ScriptError(f"claim: unexpected reply {reply!r}")
    n = len(reply) - len(reply) % 6
    columns = zip(
        reply[0:n:6],
        reply[1:n:6],
        reply[2:n:6],
        reply[3:n:6],
        reply[4:n:6],
        reply[5:n:6],
        strict=True,
    )
    return [
        Claimed(
            job_id.decode() if type(job_id) is bytes else text(job_id),
            payload,
            token,
            f,
            headers,
            waited,
        )
        for job_id, payload, token, f, headers, waited in columns
    ]


def _read_claim(reply: Any) -> ClaimBatch:
    claimed = _claimed(reply)
    n = len(claimed) * 6
    due = reply[n] if n < len(reply) else -1
    return ClaimBatch(jobs=claimed, next_due_ms=due if due >= 0 else None)


def claim_batch_call(
    queue: str, lease_ms: int, count: int = 1, worker: str | None = None
) -> ScriptCall[ClaimBatch]:
    """``worker``: the claiming worker's id, written on each claimed row (its heartbeat
    record says whether the holder is alive: ``explain``)."""
    ks = keyspace(queue)
    v.positive_int("lease_ms", lease_ms, v.MAX_MS)
    v.int_in("count", count, 1, v.MAX_COUNT)
    keys = [ks.pending, ks.active, ks.schedule, ks.meta, ks.wake]
    holder = "" if worker is None else check_id(worker)
    return script_call("claim", keys, [ks.base, lease_ms, count, holder], _read_claim)


def claim_call(queue: str, lease_ms: int, count: int = 1) -> ScriptCall[list[Claimed]]:
    sc = claim_batch_call(queue, lease_ms, count)
    return ScriptCall(sc.script, sc.keys, sc.argv, _claimed)


@functools.lru_cache(maxsize=256)
def _kept_claim_call(queue: str, lease_ms: int, count: int) -> ScriptCall[list[Claimed]]:
    """:func:`claim_call` gated and packed once per (queue, lease, count): a worker or a
    loop claims with the same arguments again and again (a refused gate is not kept)."""
    return packed_call(claim_call(queue, lease_ms, count))


@functools.lru_cache(maxsize=256)
def _kept_claim_batch_call(
    queue: str, lease_ms: int, count: int, worker: str | None
) -> ScriptCall[ClaimBatch]:
    """:func:`claim_batch_call`, kept as :func:`_kept_claim_call` is."""
    return packed_call(claim_batch_call(queue, lease_ms, count, worker))


def _exact(queue: object, lease_ms: object, count: object, worker: object = None) -> bool:
    """Whether the arguments are of the exact types a kept call is keyed on (``True`` is
    not 1 to the gate, though equal to it as a cache key)."""
    return (
        type(queue) is str
        and type(lease_ms) is int
        and type(count) is int
        and (worker is None or type(worker) is str)
    )


def complete_call(
    queue: str,
    job_id: str,
    token: int,
    result: bytes | str = b"",
) -> ScriptCall[None]:
    """The row keeps ``result`` for its retention (docs/results.md) and the completions
    stream gets an entry; ``cancelled:<reason>`` finishes the job as cancelled."""
    ks = keyspace(queue)
    keys = [ks.job(job_id), ks.active]
    argv = [job_id, v.token_str(token), v.payload_bytes(result, "result"), ks.base]

    def read(reply: Any) -> None:
        check_status(reply, f"complete {job_id}")

    return script_call("complete", keys, argv, read)


def complete_many_call(
    queue: str, done: Iterable[tuple[str, int, bytes | str]]
) -> ScriptCall[dict[str, CompleteResult]]:
    if isinstance(done, str | bytes | dict):
        raise InvalidArgument("done must be an iterable of (job_id, token, result) triples")
    done = list(done)
    if not 1 <= len(done) <= v.MAX_HELD:
        raise InvalidArgument(f"complete_many takes 1..{v.MAX_HELD} jobs per call, not {len(done)}")
    ids: list[str] = []
    tokens: list[int] = []
    results: list[bytes] = []
    for triple in done:
        if not isinstance(triple, tuple | list) or len(triple) != 3:
            raise InvalidArgument(f"done must hold (job_id, token, result) triples, not {triple!r}")
        ids.append(check_id(triple[0]))
        results.append(v.payload_bytes(triple[2], "result"))
        v.token_str(triple[1])
        tokens.append(triple[1])
    if len(set(ids)) != len(ids):
        raise InvalidArgument("complete_many: a job is given twice")
    held = complete_held_call(queue, ids, tokens, results)

    def read(reply: Any) -> dict[str, CompleteResult]:
        return dict(zip(ids, held.read(reply), strict=True))

    return ScriptCall(held.script, held.keys, held.argv, read)


def complete_held_call(
    queue: str, ids: Sequence[str], tokens: Sequence[int], results: Sequence[bytes]
) -> ScriptCall[list[CompleteResult]]:
    """The ``complete_many`` call (:func:`complete_many_call` gates its arguments, then
    builds it here) for a worker's own jobs: 1..``MAX_HELD`` distinct ids and the tokens
    a claim answered (not gated again; each result is, and the batch's size). Answers one
    :class:`CompleteResult` per job, in their order."""
    if not 1 <= len(ids) <= v.MAX_HELD or len(tokens) != len(ids) or len(results) != len(ids):
        raise InvalidArgument(f"complete_many takes 1..{v.MAX_HELD} jobs per call")
    ks = keyspace(queue)
    argv: list[Any] = [ks.base, len(ids)]
    total = 0
    for job_id, token, result in zip(ids, tokens, results, strict=True):
        result = v.payload_bytes(result, "result")
        argv += [job_id, str(token), result]
        total += len(result)
    v.batch_bytes(total)
    n = len(ids)

    def read(reply: Any) -> list[CompleteResult]:
        if not isinstance(reply, list) or len(reply) != n:
            raise ScriptError(f"complete_many: unexpected reply {reply!r}")
        try:  # 2 (already finished with this token) reads as ok
            return [COMPLETE_RESULTS[code] for code in reply]
        except (KeyError, TypeError):
            raise ScriptError(f"complete_many: unexpected reply {reply!r}") from None

    return script_call("complete_many", [ks.active], argv, read)


def fail_call(
    queue: str, job_id: str, token: int, error: str, *, retry_delay_ms: int = 0, dead: bool = False
) -> ScriptCall[FailOutcome]:
    ks = keyspace(queue)
    keys = [ks.job(job_id), ks.active, ks.schedule, ks.pending, ks.meta, ks.wake]
    argv = [
        job_id,
        v.token_str(token),
        v.text_arg("error", error),
        v.non_negative_int("retry_delay_ms", retry_delay_ms, v.MAX_MS),
        ks.base,
        "1" if dead else "0",
    ]

    def read(reply: Any) -> FailOutcome:
        if isinstance(reply, int):
            check_status(reply, f"fail {job_id}")
            raise ScriptError(f"fail {job_id}: unexpected reply {reply!r}")
        outcome = text(reply)
        if outcome == "retrying":
            return "retrying"
        if outcome == "dead":
            return "dead"
        raise ScriptError(f"fail {job_id}: unexpected reply {reply!r}")

    return script_call("fail", keys, argv, read)


def rate_limited_call(queue: str, job_id: str, token: int, ms: int) -> ScriptCall[int]:
    """The ``rate_limited`` call: the held job back on the schedule for ``ms``, no failure
    counted, its group (or queue) blocked until then; the reply is the block's end (server
    ms), or 0 when a cancel was requested (nothing written: the job ends cancelled)."""
    ks = keyspace(queue)
    argv = [job_id, v.token_str(token), v.positive_int("ms", ms, v.MAX_MS), ks.base]

    def read(reply: Any) -> int:
        if isinstance(reply, int) and reply >= 0:
            return reply
        check_status(reply, f"rate_limited {job_id}")
        raise ScriptError(f"rate_limited {job_id}: unexpected reply {reply!r}")

    return script_call(
        "rate_limited", [ks.job(job_id), ks.active, ks.schedule, ks.meta], argv, read
    )


async def rate_limited(conn: Executor, queue: str, job_id: str, token: int, ms: int) -> int:
    """A held job backs off for ``ms`` (its task raised :class:`~echomq.RateLimited`): it
    goes to the schedule without counting a failure, and its group, or else its queue,
    claims nothing until then (docs/lanes.md). Answers the block's end (server ms), or 0
    when a cancel request came first (nothing done).

    Raises:
        InvalidArgument: a bad token or ms (before any I/O). JobGone, StaleToken,
        NotActive: not the job's holder.
    """
    return await evaluate(conn, rate_limited_call(queue, job_id, token, ms))


def extend_lock_call(queue: str, job_id: str, token: int, lease_ms: int) -> ScriptCall[None]:
    ks = keyspace(queue)
    argv = [job_id, v.token_str(token), v.positive_int("lease_ms", lease_ms, v.MAX_MS)]

    def read(reply: Any) -> None:
        check_status(reply, f"extend {job_id}")

    return script_call("extend_lock", [ks.active, ks.job(job_id)], argv, read)


def _read_codes(ids: list[str], what: str) -> Callable[[Any], dict[str, ExtendResult]]:
    def read(reply: Any) -> dict[str, ExtendResult]:
        if not isinstance(reply, list) or len(reply) != len(ids):
            raise ScriptError(f"{what}: unexpected reply {reply!r}")
        try:  # keyed by Code (an IntEnum): an int code finds its member without Code(code)
            return {job_id: EXTEND_RESULTS[code] for job_id, code in zip(ids, reply, strict=True)}
        except (ValueError, KeyError, TypeError):
            raise ScriptError(f"{what}: unexpected reply {reply!r}") from None

    return read


class ExtendAnswers(dict[str, ExtendResult]):
    """What :func:`extend_locks` answers: id -> :class:`ExtendResult` (a plain dict), and
    ``cancel_reasons``: for each id answered ``cancel``, the request's reason (or None)."""

    def __init__(
        self, answers: dict[str, ExtendResult], cancel_reasons: dict[str, str | None]
    ) -> None:
        super().__init__(answers)
        self.cancel_reasons = cancel_reasons


def _read_extend(ids: list[str]) -> Callable[[Any], ExtendAnswers]:
    def read(reply: Any) -> ExtendAnswers:
        if not isinstance(reply, list) or len(reply) < len(ids):
            raise ScriptError(f"extend_locks: unexpected reply {reply!r}")
        answers = _read_codes(ids, "extend_locks")(reply[: len(ids)])
        cancelled = [job_id for job_id, answer in answers.items() if answer is ExtendResult.CANCEL]
        reasons = reply[len(ids) :]
        if len(reasons) != len(cancelled):
            raise ScriptError(f"extend_locks: unexpected reply {reply!r}")
        return ExtendAnswers(
            answers,
            {
                job_id: None if reason is None else text(reason)
                for job_id, reason in zip(cancelled, reasons, strict=True)
            },
        )

    return read


def extend_locks_call(
    queue: str, held: Iterable[tuple[str, int]], lease_ms: int
) -> ScriptCall[ExtendAnswers]:
    ks = keyspace(queue)
    v.positive_int("lease_ms", lease_ms, v.MAX_MS)
    ids, pairs = v.held_pairs(held, "extend_locks")
    return script_call("extend_locks", [ks.active], [ks.base, lease_ms, *pairs], _read_extend(ids))


def release_call(
    queue: str, held: Iterable[tuple[str, int]]
) -> ScriptCall[dict[str, ExtendResult]]:
    ks = keyspace(queue)
    ids, pairs = v.held_pairs(held, "release")
    return script_call(
        "release", [ks.active, ks.pending, ks.wake], [ks.base, *pairs], _read_codes(ids, "release")
    )


def _read_sweep(reply: Any) -> Sweep:
    if not (
        isinstance(reply, list) and len(reply) == 2 and all(isinstance(x, list) for x in reply)
    ):
        raise ScriptError(f"reap: unexpected reply {reply!r}")
    return Sweep(recovered=[text(x) for x in reply[0]], dead=[text(x) for x in reply[1]])


def reap_call(
    queue: str, *, limit: int = v.MAX_BATCH, max_recoveries: int = DEFAULT_MAX_RECOVERIES
) -> ScriptCall[Sweep]:
    """``max_recoveries`` = ``NO_COUNT`` (-1): recover every expired lease, count nothing.
    The keys and argv are in ``stalled.check_call``'s order (the base, the limit, the bound)."""
    ks = keyspace(queue)
    v.int_in("limit", limit, 1, v.MAX_BATCH)
    if max_recoveries != NO_COUNT:
        v.non_negative_int("max_recoveries", max_recoveries, v.MAX_ATTEMPTS)
    keys = [ks.active, ks.pending, ks.wake]
    return script_call("reap", keys, [ks.base, limit, max_recoveries], _read_sweep)


# -- verbs ------------------------------------------------------------------------------------


async def enqueue(
    conn: Executor,
    queue: str,
    payload: bytes | str,
    *,
    job_id: str | None = None,
    delay_ms: int = 0,
    priority: int = 0,
    max_attempts: int = 1,
    group: str | None = None,
    expires_ms: int | None = None,
) -> str:
    """Add one job; answer its id.

    ``priority``: higher runs first (-4095..4095, default 0); FIFO within a priority.
    ``delay_ms``: held in the schedule set until due. ``max_attempts``: handler failures
    allowed before the job is dead-lettered. ``group``: the job waits in that group's lane
    (fair turns between groups, per-group limits: docs/lanes.md). ``expires_ms``: its
    deadline, ms after the enqueue on the server clock: not claimed by then, the claim
    drops it into the terminal state ``expired`` (docs/runtime.md "Expiry").

    Raises:
        InvalidKey, InvalidArgument, SerializationError: before any I/O.
        DuplicateJob: a row with ``job_id`` exists; nothing is written.
    """
    job = NewJob(
        payload=payload,
        job_id=job_id,
        delay_ms=delay_ms,
        priority=priority,
        max_attempts=max_attempts,
        group=group,
        expires_ms=expires_ms,
    )
    (answer,) = await evaluate(conn, enqueue_call(queue, [job]))
    return answer


async def enqueue_many(conn: Executor, queue: str, jobs: Sequence[NewJob]) -> list[str]:
    """Add many jobs in one script call (all or nothing); answer their ids in order.

    A job with a dedup key (``NewJob.dedup``) that another job holds is not written: its
    place answers the holder's id (:func:`enqueue_batch` says which were deduplicated).

    Raises:
        InvalidKey, InvalidArgument, SerializationError: before any I/O; more than
            ``MAX_ENQUEUE`` (250) jobs (split a bigger batch into several calls).
        DuplicateJob: an id exists or repeats in the call; nothing is written.
    """
    return await evaluate(conn, enqueue_call(queue, jobs))


async def enqueue_batch(conn: Executor, queue: str, jobs: Sequence[NewJob]) -> list[Enqueued]:
    """:func:`enqueue_many`, answering an :class:`Enqueued` per job: its id and whether it
    was deduplicated (its dedup key is held: ``id`` is the holder's; nothing was written).

    Raises:
        as :func:`enqueue_many`.
    """
    gated = _gated(queue, jobs)
    answers = await evaluate(conn, enqueue_gated_call(queue, gated))
    return [
        Enqueued(id=job.id) if answer is None else answer
        for job, answer in zip(gated, answers, strict=True)
    ]


async def claim(conn: Executor, queue: str, lease_ms: int, *, count: int = 1) -> list[Claimed]:
    """Claim up to ``count`` (1..250, ``MAX_COUNT``) ready jobs with a lease of ``lease_ms``.

    Highest priority first, FIFO within a priority. Empty when the queue is paused (the
    script reads the gate itself: one round trip) or nothing is ready. Due scheduled jobs
    are promoted first. Each claim grows the row's ``token``: the returned ``token``,
    and stamps ``lease_epoch`` with the server's run id.

    Raises:
        InvalidKey, InvalidArgument: before any I/O.
    """
    if _exact(queue, lease_ms, count):
        return await evaluate(conn, _kept_claim_call(queue, lease_ms, count))
    return await evaluate(conn, claim_call(queue, lease_ms, count))


async def claim_batch(
    conn: Executor, queue: str, lease_ms: int, *, count: int = 1, worker: str | None = None
) -> ClaimBatch:
    """:func:`claim`, also answering how long until the earliest scheduled job is due
    when fewer than ``count`` jobs were ready (the worker's idle wait uses it: no extra
    round trip between an empty claim and the wake list)."""
    if _exact(queue, lease_ms, count, worker):
        return await evaluate(conn, _kept_claim_batch_call(queue, lease_ms, count, worker))
    return await evaluate(conn, claim_batch_call(queue, lease_ms, count, worker))


async def complete(
    conn: Executor,
    queue: str,
    job_id: str,
    token: int,
    result: bytes | str = b"",
) -> None:
    """Settle a held job as completed. Idempotent for the same token.

    The row keeps ``result`` for the job's retention (``keep_result``, else the queue's:
    24 h unless ``admin.set_retention`` says otherwise) and the completions stream gets the
    job's entry, in the same script (docs/results.md).

    Raises:
        JobGone, StaleToken, NotActive: the caller does not hold the job; nothing changed.
    """
    await evaluate(conn, complete_call(queue, job_id, token, result))


async def complete_many(
    conn: Executor, queue: str, done: Iterable[tuple[str, int, bytes | str]]
) -> dict[str, CompleteResult]:
    """Settle many held jobs as completed in one script call: ``done`` is ``(job_id,
    token, result)`` triples (1..``MAX_HELD`` (250), distinct ids). Answers id ->
    ``ok`` (completed, or already completed with that token: nothing changed) | ``gone``
    | ``stale`` | ``not_active`` (nothing changed for that job), one per job: each job is
    fenced by its own token and checked in :func:`complete`'s order, and finishes as
    :func:`complete` finishes it (its completions entry, counters, retention).

    Raises:
        InvalidKey, InvalidArgument, SerializationError, PayloadTooLarge: before any I/O.
    """
    return await evaluate(conn, complete_many_call(queue, done))


async def complete_held(
    conn: Executor,
    queue: str,
    ids: Sequence[str],
    tokens: Sequence[int],
    results: Sequence[bytes],
) -> list[CompleteResult]:
    """:func:`complete_many` for a worker's own jobs (:func:`complete_held_call`): one
    answer per job, in their order."""
    return await evaluate(conn, complete_held_call(queue, ids, tokens, results))


async def fail(
    conn: Executor,
    queue: str,
    job_id: str,
    token: int,
    error: str,
    *,
    retry_delay_ms: int = 0,
    dead: bool = False,
) -> FailOutcome:
    """Settle a held job as failed: ``"retrying"`` (after ``retry_delay_ms``) or ``"dead"``.

    The job is dead once its ``failures`` reach ``max_attempts``, or at once with ``dead``.

    Raises:
        JobGone, StaleToken, NotActive: the caller does not hold the job; nothing changed.
    """
    return await evaluate(
        conn, fail_call(queue, job_id, token, error, retry_delay_ms=retry_delay_ms, dead=dead)
    )


async def extend_lock(conn: Executor, queue: str, job_id: str, token: int, lease_ms: int) -> None:
    """Checkpoint a lease: its deadline becomes server now + ``lease_ms``.

    Raises:
        InvalidArgument: ``lease_ms`` is not a positive int (before any I/O).
        JobGone: no row. StaleToken: not the holder. NotActive: the lease was collected.
    """
    await evaluate(conn, extend_lock_call(queue, job_id, token, lease_ms))


async def extend_locks(
    conn: Executor, queue: str, held: Iterable[tuple[str, int]], lease_ms: int
) -> ExtendAnswers:
    """Checkpoint many leases in one round trip; answer id -> ExtendResult.

    ``cancel`` is ``ok`` (the lease was extended) for a job that carries a cancel request:
    its holder should stop it; ``.cancel_reasons`` has the reasons.

    Raises:
        InvalidKey, InvalidArgument: before any I/O; more than ``MAX_HELD`` (250) pairs.
    """
    return await evaluate(conn, extend_locks_call(queue, held, lease_ms))


async def release(
    conn: Executor, queue: str, held: Iterable[tuple[str, int]]
) -> dict[str, ExtendResult]:
    """Hand held jobs back to pending at once, without counting (graceful shutdown).

    Raises:
        InvalidKey, InvalidArgument: before any I/O; more than ``MAX_HELD`` (250) pairs.
    """
    return await evaluate(conn, release_call(queue, held))


async def reap(
    conn: Executor,
    queue: str,
    *,
    limit: int = v.MAX_BATCH,
) -> list[str]:
    """Crash recovery (the contract's verb): expired leases back to pending, no count.

    Answers the recovered ids. At most ``limit`` (1..100, ``MAX_BATCH``) leases per call:
    call again while it answers a full page. An expired id with no row leaves active and is
    listed nowhere.
    The worker's ``recovery="reap"`` mode uses :func:`reap_counted` instead, so a job that
    crashes every worker that runs it is bounded (docs/runtime.md, "Recovery").

    Raises:
        InvalidKey, InvalidArgument: before any I/O.
    """
    sweep = await evaluate(conn, reap_call(queue, limit=limit, max_recoveries=NO_COUNT))
    return sweep.recovered


async def reap_counted(
    conn: Executor,
    queue: str,
    *,
    limit: int = v.MAX_BATCH,
    max_recoveries: int = DEFAULT_MAX_RECOVERIES,
) -> Sweep:
    """:func:`reap`, counting each expired lease as a stall on the row.

    A job is recovered while its ``stalled`` count is at most ``max_recoveries`` (default
    1: recovered once); the stall after that dead-letters it (``last_error = "stalled"``).
    A lease stamped before the server's last restart is recovered without counting.

    Raises:
        InvalidKey, InvalidArgument: before any I/O.
    """
    return await evaluate(conn, reap_call(queue, limit=limit, max_recoveries=max_recoveries))


def get_job_args(queue: str, job_id: str) -> tuple[str, str]:
    """The command that reads a job's row (a plain HGETALL: a read needs no script)."""
    return ("HGETALL", Keyspace(queue).job(job_id))


def read_job(job_id: str, row: Any) -> JobInfo | None:
    """Decode an HGETALL reply (a flat list from the trio wire, a dict from redis-py)."""
    if not row:
        return None
    if isinstance(row, list):
        row = dict(zip(row[::2], row[1::2], strict=True))
    if not isinstance(row, dict) or b"state" not in row:
        raise ScriptError(f"job {job_id}: a row without a state: {row!r}")
    return JobInfo.from_row(job_id, row)


async def get_job(conn: Executor, queue: str, job_id: str) -> JobInfo | None:
    """The job's row, or None when there is none."""
    return read_job(job_id, await conn.execute(*get_job_args(queue, job_id)))
