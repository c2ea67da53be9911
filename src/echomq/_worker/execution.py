"""Run one claimed job in its slot task's lane scope and settle its outcome.

Rule 1: one job, one scope: its slot task's lane scope while its handler runs
(``cancellation.py`` rule 5, ``slots.py`` rule 4). Only :mod:`.cancellation` cancels it,
for a remote reason: a cancel request (the job completes with ``cancelled:<reason>``,
never retried), a lost lease (the outcome is never settled: a newer holder owns the job),
a fence (a cancel's grace ran out: Redis settled it cancelled; never settled here), a
shutdown past grace (the job is handed back to pending by the worker, in one batch).
Rule 1b: time limits (docs/runtime.md, "Time limits"). ``soft_timeout`` raises
``SoftTimeLimit`` inside the job (``timelimits.py``); ``timeout`` stops it hard: it is the
lane's deadline (an async task is cancelled), a thread task is abandoned, a process task's
child killed; the attempt fails with ``TimeoutError``. A handler that returns past its
timeout without a checkpoint (it blocked the event loop) fails the same way: its value is
not committed.
Stopping a thread or a child hard is logged and counted (``abandoned``, ``terminated``).
Rule 2: the outcome is settled under a shielded scope with a bounded timeout;
``ConnectionLost`` and ``Unavailable`` (``errors.TRANSIENT``: the wire gave up after
``connect_timeout``, e.g. a reshard or a failover slower than that) are retried with backoff
inside that bound (``complete`` is idempotent
for the same token; a ``fail`` that did land answers ``NotActive``/``StaleToken`` the
second time, which also means "done"). A refusal means the lease was lost: logged, never
retried, never forced. Any other error while settling (a server error, a result the
verb refuses) is logged and the job is failed dead instead, with that reason; if even
that is refused, the lease lapses and recovery counts the job as stalled.
Rule 3: a job's failure is never the worker's. Whatever leaves user code (any exception,
``SystemExit`` and ``KeyboardInterrupt`` included, alone or in an exception group), the
codec (a payload it cannot decode, a result it cannot encode) or a retry delay that
cannot be scheduled ends as that job's failure; only trio's ``Cancelled`` of a real
cancellation passes (a stop's: settled by rule 1; the worker's own: it goes on). What the
lane finds once the handler is out (``slots.Lane.end``: a scope left open, a ``Cancelled``
nothing asked for, its slot's nursery cancelled) is that job's failure too, settled like
any other, with what the code did as ``last_error``.
``last_error`` is ``Type: message``, at most :data:`MAX_ERROR_TEXT` bytes; the traceback
goes to the worker's log and to the job's log list, at most one log line (head and tail
kept). A cut says where: ``... [truncated 12,345 chars]``.
"""

from __future__ import annotations

import functools
import logging
import math
import traceback
from collections.abc import Callable
from time import perf_counter
from typing import Any

import attrs
import trio

from .. import _tracing, jobs
from .._jitter import Backoff
from .._model.backoff import NoDelay, backoff_ms, default_backoff, delay_ms
from .._model.cancel import cancelled_result
from .._model.codec import Call
from .._model.flow import Feed, Policy, split_payload, value_or_failure
from .._model.job import Claimed
from .._model.text import clip, error_text, safe_str
from .._scripts.calls import Executor
from ..errors import (
    TRANSIENT,
    JobCancelled,
    JobGone,
    NotActive,
    Retry,
    SerializationError,
    StaleToken,
)
from ..flows import children as flow_children
from ..jobs.rows import MAX_LOG_LINE
from .cancellation import Held, InFlight, Stop
from .context import Job, bind, unbind
from .processes import ProcessPool
from .protocols import QueueSpec, TaskSpec
from .settling import Completions, Item
from .slots import Ending, Lane
from .tally import Tally
from .timelimits import ThreadCall, soft_limited

__all__ = ["MAX_ERROR_TEXT", "Counters", "JobRunner", "Settlement"]

log = logging.getLogger("echomq.worker")

_LOST = (StaleToken, NotActive, JobGone)
# a decoded job: its task, its call, whether it is a flow parent, whether it runs plain
Plan = tuple[TaskSpec, Call, bool, bool]

MAX_ERROR_TEXT = 8 * 1024  # bytes of a job's last_error (and of its events' error field)
_REASON_ROOM = 1024  # bytes of an error text kept for "(not retried: ...)"


@attrs.frozen(kw_only=True)
class Settlement:
    """How a job ends this attempt: ``complete`` (with a result) or ``fail``.

    ``fallback``: this is already the dead-letter that replaced a refused settlement.
    """

    complete: bool
    result: bytes = b""
    error: str = ""
    retry_delay_ms: int = 0
    dead: bool = False
    cancelled: bool = False
    traceback: str | None = None
    fallback: bool = False


@attrs.define
class Counters:
    """What this worker did, for ``Worker.statistics()``."""

    claimed: int = 0
    completed: int = 0
    failed: int = 0
    retried: int = 0
    cancelled: int = 0
    lost: int = 0
    released: int = 0
    abandoned: int = 0  # threads left running after a hard stop (their outcome unused)
    terminated: int = 0  # process children killed by a hard stop (replaced)


def _with_reason(error: str, reason: str) -> str:
    """``error (reason)``, the whole at most MAX_ERROR_TEXT bytes, the reason kept."""
    note = clip(f" ({reason})", _REASON_ROOM)
    return clip(error, MAX_ERROR_TEXT - len(note.encode())) + note


def _failure_of(exc: BaseException) -> BaseException | None:
    """The part of ``exc`` that is the job's failure; None when it is only trio's Cancelled.

    A group is split: its Cancelled parts belong to trio (a cancellation is level-triggered:
    the next checkpoint of a still-cancelled scope raises it again), the rest is the job's.
    A group left with a single exception is that exception.
    """
    if isinstance(exc, trio.Cancelled):
        return None
    if not isinstance(exc, BaseExceptionGroup):
        return exc
    _, rest = exc.split(trio.Cancelled)
    while isinstance(rest, BaseExceptionGroup) and len(rest.exceptions) == 1:
        rest = rest.exceptions[0]
    return rest


def _traceback_line(exc: BaseException) -> str:
    """The traceback as one log line: at most MAX_LOG_LINE bytes, head and tail kept."""
    try:
        text = "".join(traceback.format_exception(exc)).rstrip()
    except Exception:  # a traceback that cannot be formatted: its type then
        text = error_text(exc)
    return clip(text, MAX_LOG_LINE, tail=MAX_LOG_LINE // 2)


@attrs.define(eq=False)
class JobRunner:
    """Runs claimed jobs for one worker; the consumer starts :meth:`run` per job."""

    queue: QueueSpec
    conn: Executor  # an echomq.Connection (tests may wrap it)
    inflight: InFlight
    on_done: Callable[[int], None]  # that many slots are free again
    settle_timeout: float = 10.0
    counters: Counters = attrs.field(factory=Counters)
    to_release: list[tuple[str, int]] = attrs.field(factory=list)
    processes: ProcessPool = attrs.field(factory=ProcessPool)
    tally: Tally = attrs.field(factory=Tally)  # per task: outcomes, run times (tally.py)

    completions: Completions = attrs.field(init=False)
    # task name -> (the task, its lease ms, whether it takes the fast path): read once
    _known: dict[str, tuple[TaskSpec, int, bool]] = attrs.field(factory=dict, init=False)

    def __attrs_post_init__(self) -> None:
        self.completions = Completions(
            conn=self.conn,
            queue=self.queue.name,
            settle_timeout=self.settle_timeout,
            recorded=self._recorded_batch,
            lost=self._lost,
            finish=self._finish_batch,
            settle_alone=self._settle_completion,
        )

    async def run(self, claimed: Claimed, held: Held) -> None:
        """Execute, settle, and free the slot; hand the job back if it was not settled."""
        settled: bool | None = False  # None: the batch of completions finishes it
        try:
            if held.stop is not None and held.stop is not Stop.CANCEL:
                # lost, fenced or shut down before it started (a prefetched job waits
                # for its slot: consumer.py rule 5): never run
                settlement: Settlement | bytes | None = None
            elif _tracing.ENABLED and _tracing.on():  # docs/observability.md
                settlement = await self._execute_traced(claimed, held)
            else:
                plan = self._plan(claimed, held)
                if isinstance(plan, Settlement):  # it ends before it runs
                    settlement = plan
                elif plan[3]:
                    # the common case: an async task with no time limits, not a flow
                    # parent. The same steps as _execute (rule 1: its lane; rule 3),
                    # inline (no coroutine of its own), fewer objects: the ``Job`` of a
                    # task that does not take it is made only if ``current_job()`` asks
                    task, call = plan[0], plan[1]
                    if task.wants_job:
                        job = self._job(task, claimed, held)
                        args = (job, *call.args)
                        bound = bind(job)
                    else:
                        args = call.args
                        bound = bind(_Deferred(self, task, claimed, held))
                    started = perf_counter()
                    lane = held.lane
                    assert lane is not None  # (a slot task's: slots.py)
                    try:
                        if held.stop is not None:  # a cancel request reached it before it ran
                            lane.cancel()
                        held.running = lane
                        try:
                            value = await task.fn(*args, **call.kwargs)
                        except BaseException as exc:  # rule 3: only trio's Cancelled passes
                            held.running = None
                            settlement = self._ended(task, claimed, held, lane, exc, None)
                        else:
                            held.running = None
                            if lane.clean():  # (slots.py rule 5: nothing to look at)
                                settlement = self._encode(claimed, value)
                            else:
                                settlement = self._ended(task, claimed, held, lane, None, value)
                    finally:
                        unbind(bound)
                        held.ran = perf_counter() - started
                else:
                    settlement = await self._execute(claimed, held, plan)
            if held.stop is Stop.FENCED:
                self.counters.cancelled += 1
                self.tally.record(held.task, "cancelled", held.ran)
                log.warning(
                    "job %s was fenced (its cancel grace ran out): settled cancelled; "
                    "its own outcome is not used",
                    held.id,
                )
            elif settlement is not None and held.stop is not Stop.LOST:
                held.settling = True
                if isinstance(settlement, bytes):  # completed: its encoded result (fast path)
                    settled = None
                    completions = self.completions
                    if not completions.join(held, settlement, False):  # (no coroutine)
                        await completions.add(held, settlement, False)
                    return
                if settlement.complete and settlement.traceback is None:
                    # batched with the completions of this tick; the batch finishes it
                    settled = None
                    await self.completions.add(held, settlement.result, settlement.cancelled)
                    return
                settled = await self._settle(held, settlement)
            elif held.stop is Stop.LOST:
                self.counters.lost += 1
                self.tally.record(held.task, "lost", held.ran)
                log.warning("job %s lost its lease; its outcome is not settled", held.id)
        finally:
            if settled is not None:
                self._finish(held, settled)

    def _finish(self, held: Held, settled: bool) -> None:
        """The job's outcome is recorded (or recovery owns it): free its slot."""
        self.inflight.remove(held)
        if not settled and held.stop not in (Stop.LOST, Stop.FENCED):
            # a shutdown past grace (or the worker cancelled from outside): hand back
            self.to_release.append((held.id, held.token))
        self.on_done(1)

    def _finish_batch(self, batch: list[Item], settled: set[Held]) -> None:
        """:meth:`_finish` for each job of a batch of completions, its slots freed at once."""
        helds = [held for held, _, _ in batch]
        self.inflight.remove_many(helds)
        for held in helds:
            if held not in settled and held.stop not in (Stop.LOST, Stop.FENCED):
                self.to_release.append((held.id, held.token))  # as in _finish
        self.on_done(len(helds))

    def _recorded(self, held: Held, cancelled: bool) -> None:
        if cancelled:
            self.counters.cancelled += 1
            self.tally.record(held.task, "cancelled", held.ran)
        else:
            self.counters.completed += 1
            self.tally.record(held.task, "completed", held.ran)

    def _recorded_batch(self, items: list[Item]) -> None:
        """:meth:`_recorded` for each of ``items`` (the completions the server took)."""
        done = [held for held, _, cancelled in items if not cancelled]
        if len(done) < len(items):
            for held, _, cancelled in items:
                if cancelled:
                    self._recorded(held, True)
        self.counters.completed += len(done)
        self.tally.record_many(done, "completed")

    def _lost(self, held: Held) -> None:
        self.counters.lost += 1
        self.tally.record(held.task, "lost", held.ran)

    async def _settle_completion(self, held: Held, result: bytes, cancelled: bool) -> bool:
        settlement = Settlement(complete=True, result=result, cancelled=cancelled)
        return await self._settle(held, settlement)

    async def _execute_traced(self, claimed: Claimed, held: Held) -> Settlement | bytes | None:
        """:meth:`_execute` inside the run's span, a child of the enqueue's; its outcome is
        the one the run asked for (a batched completion is recorded after the span ends)."""
        with _tracing.processing(
            self.queue.name, claimed.id, claimed.failures + 1, claimed.trace
        ) as span:
            s = await self._execute(claimed, held)
            task = held.task or ""
            if held.stop is Stop.FENCED:
                span.outcome(task, "cancelled")
            elif s is None:
                span.outcome(task, "lost" if held.stop is Stop.LOST else "handed back")
            elif isinstance(s, bytes):
                span.outcome(task, "completed")
            elif s.complete:
                span.outcome(task, "cancelled" if s.cancelled else "completed")
            else:
                span.outcome(task, "dead" if s.dead else "retried", s.error)
            return s

    def _plan(self, claimed: Claimed, held: Held) -> Plan | Settlement:
        """The decoded payload and its task: ``(task, call, is a flow parent, plain)``
        (plain: an async task with no time limits, not a flow parent); or the settlement
        of a job that ends before it runs (a payload that cannot be decoded, no such task)."""
        queue = self.queue
        is_parent, payload = split_payload(claimed.payload)
        try:
            call = queue.codec.decode_call(payload)
        except Exception as exc:  # a custom codec's own error is the job's too
            return self._undecodable(claimed.id, exc, "the payload could not be decoded")
        held.task = call.task
        task = queue.tasks.get(call.task)
        if task is None:
            error = f"TaskNotRegistered: no task named {call.task!r} on queue {queue.name!r}"
            delay = backoff_ms(default_backoff, claimed.failures + 1)
            return Settlement(
                complete=False, error=clip(error, MAX_ERROR_TEXT), retry_delay_ms=delay
            )
        known = self._known.get(call.task)
        if known is None or known[0] is not task:  # a task's first job: what it needs
            opts = task.options
            plain = task.is_async and opts.timeout is None and opts.soft_timeout is None
            known = self._known[call.task] = (task, opts.lease_ms, plain)
        held.lease_ms = known[1]
        held.task = task.name
        return task, call, is_parent, known[2] and not is_parent

    async def _execute(
        self, claimed: Claimed, held: Held, plan: Plan | None = None
    ) -> Settlement | bytes | None:
        """Run the job; answer how it ends: a :class:`Settlement`, or the encoded result of
        a completion (bytes), or None (not settled here: lost, fenced, handed back).
        (:meth:`run` runs a plain task's job itself, the same way, with fewer objects.)"""
        if plan is None:
            found = self._plan(claimed, held)
            if not isinstance(found, tuple):
                return found
            plan = found
        task, call, is_parent, _ = plan
        args = call.args
        results: list[Any] | None = None
        if is_parent:  # a flow parent: its children's outcomes, its policy (docs/flows.md)
            inputs = await self._children(claimed)
            if isinstance(inputs, Settlement):
                return inputs
            results, feed = inputs
            if feed is Feed.ONE:
                args = (results[0] if results else None, *args)
            elif feed is Feed.ALL:
                args = (list(results), *args)
        job = self._job(task, claimed, held, results)
        timeout, soft = task.options.timeout, task.options.soft_timeout
        start = trio.current_time()
        limit = None if timeout is None else start + timeout
        soft_at = None if soft is None else start + soft
        lane = held.lane
        assert lane is not None  # (a slot task's: slots.py)
        started = perf_counter()
        bound = bind(job)
        try:
            if held.stop is not None:  # stopped before its handler ran
                lane.cancel()
            if limit is not None:  # rule 1b: its timeout is the lane's deadline
                lane.limit(limit)
            held.running = lane
            try:
                value = await self._invoke(task, held, job, args, call.kwargs, limit, soft_at)
            except BaseException as exc:  # rule 3: only trio's Cancelled passes
                held.running = None
                return self._ended(task, claimed, held, lane, exc, None, limit)
            held.running = None
            return self._ended(task, claimed, held, lane, None, value, limit)
        finally:
            unbind(bound)
            held.ran = perf_counter() - started

    def _ended(
        self,
        task: TaskSpec,
        claimed: Claimed,
        held: Held,
        lane: Lane,
        exc: BaseException | None,
        value: Any,
        deadline: float | None = None,
    ) -> Settlement | bytes | None:
        """How a run ends once its handler returned ``value`` or raised ``exc`` (rule 3):
        what the lane found (``slots.py`` rule 5) first, then what the handler did.
        Called before any checkpoint, in the ``except`` block of ``exc``."""
        failure = None if exc is None else _failure_of(exc)
        ending = lane.end(exc, exc is not None and failure is None)
        if ending is Ending.HANDLER:
            if failure is not None:
                assert exc is not None
                return self._outcome(task, claimed, held, failure, exc, deadline)
            if deadline is not None and trio.current_time() >= deadline:
                return self._timed_out(task, claimed)  # rule 1b: it blocked past it
            return self._encode(claimed, value)
        if ending is Ending.STOPPED:
            return _cancelled(held)
        if ending is Ending.TIMED_OUT:
            return self._timed_out(task, claimed)
        if ending is Ending.PASSED:
            assert exc is not None
            raise exc
        # the job broke trio's rules (slots.py rule 5): its failure, what it raised noted
        error = ending.value
        tb = None
        if failure is not None:
            error = _with_reason(error, f"it raised {error_text(failure, _REASON_ROOM)}")
        if exc is not None:
            tb = _traceback_line(exc)
        log.warning("job %s (%s): %s%s", claimed.id, task.name, error, f"\n{tb}" if tb else "")
        return self._failure(task, claimed, error, tb)

    def _timed_out(self, task: TaskSpec, claimed: Claimed) -> Settlement:
        error = f"TimeoutError: ran longer than {task.options.timeout:g} s"
        return self._failure(task, claimed, error, None)

    def _job(
        self, task: TaskSpec, claimed: Claimed, held: Held, children: list[Any] | None = None
    ) -> Job:
        """The ``Job`` context of a run (``children``: a flow parent's inputs)."""
        return Job(
            id=claimed.id,
            task=task.name,
            queue=self.queue.name,
            attempt=claimed.failures + 1,
            token=claimed.token,
            cancel_token=held.cancel_token,
            conn=self.conn,
            lease_ms=held.lease_ms,
            lose=held.lose,
            children=children,
        )

    def _encode(self, claimed: Claimed, value: Any) -> bytes | Settlement:
        """The job's result as stored, or (a value the codec refuses) its dead-letter."""
        try:
            return self.queue.codec.encode_result(value)
        except Exception as exc:  # as for decoding
            return self._undecodable(claimed.id, exc, "the result could not be encoded")

    async def _children(self, claimed: Claimed) -> tuple[list[Any], Feed] | Settlement:
        """A flow parent's inputs: its children's results as its policy says, or the
        settlement that ends it (a failed child under policy ``fail``; a result that
        cannot be decoded; the read failing: retried)."""
        try:
            kids = await flow_children(self.conn, self.queue.name, claimed.id)
        except Exception as exc:  # the read failed: try again later, as a failure would
            error = clip(f"the children's results could not be read: {error_text(exc)}", 1024)
            delay = backoff_ms(default_backoff, claimed.failures + 1)
            return Settlement(complete=False, error=error, retry_delay_ms=delay)
        policy = Policy(kids.policy)
        decode = self.queue.codec.decode_result
        values: list[Any] = []
        for outcome in kids.outcomes:
            if outcome is None:
                continue  # not finished: only a parent failed early by policy fail
            if outcome.state != "completed":
                if policy is Policy.FAIL:
                    failure = value_or_failure(outcome, decode)
                    error = clip(f"ChildFailed: {failure}", MAX_ERROR_TEXT)
                    return Settlement(complete=False, error=error, dead=True)
                if policy is Policy.IGNORE:
                    continue
            try:
                values.append(value_or_failure(outcome, decode))
            except Exception as exc:
                return self._undecodable(claimed.id, exc, f"child {outcome.id}'s result")
        return values, Feed(kids.feed)

    def _outcome(
        self,
        task: TaskSpec,
        claimed: Claimed,
        held: Held,
        failure: BaseException,
        raised: BaseException,
        deadline: float | None,
    ) -> Settlement:
        """What an exception out of the task means for the job."""
        if isinstance(failure, Retry):
            return self._retry(task, claimed, failure)
        if isinstance(failure, JobCancelled):
            reason = failure.reason if failure.reason is not None else held.cancel_token.reason
            return Settlement(complete=True, result=cancelled_result(reason), cancelled=True)
        if (
            isinstance(failure, trio.TooSlowError)
            and deadline is not None
            and trio.current_time() >= deadline
        ):
            return self._timed_out(task, claimed)
        tb = _traceback_line(raised)
        log.warning("job %s (%s) raised:\n%s", claimed.id, task.name, tb)
        return self._failure(task, claimed, error_text(failure), tb)

    @staticmethod
    def _undecodable(job_id: str, exc: Exception, what: str) -> Settlement:
        """Dead at once: a payload that cannot be decoded, a result that cannot be encoded."""
        error = error_text(exc)
        if not isinstance(exc, SerializationError):  # a custom codec's bug: say where it hit
            error = _with_reason(error, what)
        error = clip(error, MAX_ERROR_TEXT)
        log.warning("job %s: %s", job_id, error)
        return Settlement(complete=False, error=error, dead=True)

    def _failure(self, task: TaskSpec, claimed: Claimed, error: str, tb: str | None) -> Settlement:
        try:
            delay = backoff_ms(task.options.backoff, claimed.failures + 1)
        except NoDelay as why:
            error = _with_reason(error, f"not retried: {why}")
            return Settlement(complete=False, error=error, dead=True, traceback=tb)
        return Settlement(
            complete=False, error=clip(error, MAX_ERROR_TEXT), retry_delay_ms=delay, traceback=tb
        )

    def _retry(self, task: TaskSpec, claimed: Claimed, ask: Retry) -> Settlement:
        error = f"Retry: {safe_str(ask.reason)}"
        try:
            if ask.delay is not None:
                delay = delay_ms(ask.delay)
            else:
                delay = backoff_ms(task.options.backoff, claimed.failures + 1)
        except NoDelay as why:
            return Settlement(
                complete=False, error=_with_reason(error, f"not retried: {why}"), dead=True
            )
        return Settlement(complete=False, error=clip(error, MAX_ERROR_TEXT), retry_delay_ms=delay)

    async def _invoke(
        self,
        task: TaskSpec,
        held: Held,
        job: Job,
        args: tuple[Any, ...],
        kwargs: Any,
        deadline: float | None,
        soft_at: float | None,
    ) -> Any:
        if task.wants_job:
            args = (job, *args)
        if task.is_async:
            if soft_at is None:
                return await task.fn(*args, **kwargs)
            message = f"ran longer than {task.options.soft_timeout:g} s (the soft time limit)"
            return await soft_limited(task.fn(*args, **kwargs), soft_at, message)
        # A thread cannot be interrupted: a cancel request waits for it (the code may poll
        # current_job().cancel_token); a fence, a lost lease, a shutdown past grace or the
        # timeout abandon it (it runs on, but its outcome is never used). A process task's
        # child is killed instead (``process=True``).
        hard = trio.CancelScope(shield=True, deadline=math.inf if deadline is None else deadline)
        held.hard_scope = hard
        with hard:
            if task.options.process:
                fn = task.fn
                return await self.processes.run(
                    fn.__module__, fn.__qualname__, args, kwargs, soft_deadline=soft_at
                )
            call = ThreadCall(functools.partial(task.fn, *args, **kwargs))
            return await call.run(soft_at)
        why = held.stop.value if held.stop is not None else "its timeout"
        if task.options.process:
            self.counters.terminated += 1
            log.warning("job %s (%s): its process child was killed (%s)", held.id, task.name, why)
        else:
            self.counters.abandoned += 1
            log.warning(
                "job %s (%s): its thread was abandoned (%s): it runs on until it returns, "
                "and its outcome is never used",
                held.id,
                task.name,
                why,
            )
        await trio.lowlevel.checkpoint()  # abandoned: deliver the cancel that caused it

    async def _settle(self, held: Held, settlement: Settlement) -> bool:
        """Record the outcome; True once the server took it (or already had it)."""
        s = settlement
        with trio.CancelScope(shield=True), trio.move_on_after(self.settle_timeout):
            backoff = Backoff(0.02, 1.0)
            while True:
                try:
                    if s.traceback is not None:
                        await self._write_log(held, s.traceback)
                        s = attrs.evolve(s, traceback=None)
                    await self._apply(held, s)
                    return True
                except _LOST as exc:
                    if s.cancelled:  # a cooperative cancel that its fence overtook
                        self.counters.cancelled += 1
                        self.tally.record(held.task, "cancelled", held.ran)
                    else:
                        self.counters.lost += 1
                        self.tally.record(held.task, "lost", held.ran)
                    log.warning(
                        "job %s: settling refused (%r); a newer holder owns it, or a fence "
                        "settled it",
                        held.id,
                        exc,
                    )
                    return True  # never retried, never handed back
                except TRANSIENT as exc:
                    log.warning("job %s: settling failed (%s); retrying", held.id, exc)
                    await backoff.sleep()
                except Exception as exc:  # not transient: fail the job instead
                    why = error_text(exc, _REASON_ROOM)
                    if s.fallback:
                        log.error(
                            "job %s: settling refused again (%s); its lease will lapse and "
                            "recovery counts it as stalled",
                            held.id,
                            why,
                        )
                        return True
                    log.error("job %s: settling refused (%s); failing it dead", held.id, why)
                    s = _fallback(s, why)
        log.error(
            "job %s: could not settle within %.1f s; its lease will lapse and recovery returns it",
            held.id,
            self.settle_timeout,
        )
        return True  # do not also hand it back: the recovery sweep owns it now

    async def _write_log(self, held: Held, line: str) -> None:
        """Append the traceback to the job's logs; only a transient error is worth a retry."""
        try:
            await jobs.add_log(self.conn, self.queue.name, held.id, line)
        except TRANSIENT:
            raise
        except JobGone:
            pass  # the fail that follows says so
        except Exception as exc:  # the failure matters more than its log
            log.error("job %s: its traceback was not logged (%s)", held.id, error_text(exc, 512))

    async def _apply(self, held: Held, s: Settlement) -> None:
        conn, name = self.conn, self.queue.name
        if s.complete:
            await jobs.complete(conn, name, held.id, held.token, s.result)
            self._recorded(held, s.cancelled)
            return
        outcome = await jobs.fail(
            conn, name, held.id, held.token, s.error, retry_delay_ms=s.retry_delay_ms, dead=s.dead
        )
        if outcome == "dead":
            self.counters.failed += 1
            self.tally.record(held.task, "dead", held.ran)
        else:
            self.counters.retried += 1
            self.tally.record(held.task, "retried", held.ran)


class _Deferred:
    """The ``Job`` of a plain run whose task does not take it: made at the first
    ``current_job()`` (``context.py`` rule 4), the same one after."""

    __slots__ = ("_claimed", "_held", "_made", "_runner", "_task")

    def __init__(self, runner: JobRunner, task: TaskSpec, claimed: Claimed, held: Held) -> None:
        self._runner = runner
        self._task = task
        self._claimed = claimed
        self._held = held
        self._made: Job | None = None

    def job(self) -> Job:
        made = self._made
        if made is None:
            made = self._made = self._runner._job(self._task, self._claimed, self._held)
        return made


def _cancelled(held: Held) -> Settlement | None:
    """A job whose scope was cancelled: completed ``cancelled:<reason>`` when a cancel
    request stopped it; None (not settled here) for a lost lease, a fence or a shutdown."""
    if held.stop is Stop.CANCEL:
        reason = held.cancel_token.reason
        return Settlement(complete=True, result=cancelled_result(reason), cancelled=True)
    return None


def _fallback(s: Settlement, why: str) -> Settlement:
    """The dead-letter that replaces a settlement the server refused."""
    if s.complete:
        what = "the cancellation" if s.cancelled else "the result"
        error = clip(f"{what} could not be stored: {why}", MAX_ERROR_TEXT)
    else:
        error = _with_reason(s.error, f"not retried: settling failed: {why}")
    return Settlement(complete=False, error=error, dead=True, fallback=True)
