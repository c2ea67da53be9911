"""The one run path: every claimed job goes through :meth:`JobRunner.run`.

Rule 1 (the path): check the stop (a job lost, fenced or shut down before it started never
runs), decode the payload and plan the run, run the handler in its slot scope with its
time limits, turn what came out into an outcome (``outcome.py``), hand the outcome to the
settler (``settle.py``). Tracing wraps this path in the run's span; it does not repeat it.
A plain task (async, no time limits, not a flow parent) takes the same path with fewer
objects: no ``Job`` unless the task takes it or asks ``current_job()``, no limits to set.
Rule 2 (the scope): a job's handler runs in its slot task's scope (``pool.SlotScope``).
Only the held-job table (``cancellation.py``) cancels it, for a remote reason: a cancel
request (the job is settled cancelled, never retried), a lost lease (the
outcome is never settled: a newer holder owns the job), a fence (a cancel's grace ran out:
Redis settled it cancelled; never settled here), a shutdown past grace (the job is handed
back to pending by the worker, in one batch).
Rule 3 (time limits; docs/runtime.md, "Time limits"): ``soft_timeout`` raises
``SoftTimeLimit`` inside the job (``pool.soft_limited``, ``timelimits.py``); ``timeout``
stops it hard: it is the slot scope's deadline (an async task is cancelled), a thread task
is abandoned, a process task's child killed; the attempt fails with ``TimeoutError``. A
handler that returns past its timeout without a checkpoint (it blocked the event loop)
fails the same way: its value is not committed. Stopping a thread or a child hard is
logged and counted (``abandoned``, ``terminated``).
Rule 4 (isolation): what leaves the handler is the job's (``outcome.py`` rule 1); only
trio's ``Cancelled`` of a real cancellation passes (a stop's: settled by rule 2; the
worker's own: it goes on). What the slot scope finds once the handler is out
(``SlotScope.end``: a scope left open, a ``Cancelled`` nothing asked for, its slot's
nursery cancelled) is that job's failure too, settled like any other, with what the code
did as ``last_error``.
Rule 5 (hooks; hooks.py): with worker-side hooks on the queue, every run makes its
``Job`` (kept on the held job for the outcome hooks, with what the run raised), and the
handler is called through the ``around_run`` hooks, inside the slot scope and under the
same time limits: what they raise is the job's, as if the handler had.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Sequence
from time import perf_counter
from typing import Any

import attrs
import trio

from .. import _tracing
from .._model.backoff import backoff_ms, default_backoff
from .._model.codec import Call, Codec
from .._model.errback import split_errback
from .._model.flow import Feed, Policy, split_fed, split_payload, value_or_failure
from .._model.headers import decode_headers
from .._model.job import Claimed
from .._model.text import clip, error_text
from .._scripts.calls import Executor
from ..flows import children as flow_children
from .builtins import BUILTINS
from .cancellation import Held, Stop
from .context import Job, bind, unbind
from .hooks import Hooks, run_around
from .outcome import (
    MAX_ERROR_TEXT,
    REASON_ROOM,
    Outcome,
    Settlement,
    cancelled,
    failed,
    failure_of,
    raised,
    timed_out,
    traceback_line,
    undecodable,
    with_reason,
)
from .pool import Ending, SlotScope, soft_limited
from .processes import ProcessPool
from .protocols import QueueSpec, TaskSpec
from .settle import Settler
from .tally import Counters, TaskTally
from .timelimits import ThreadCall

__all__ = ["JobRunner"]

log = logging.getLogger("echomq.worker")


@attrs.frozen
class _Known:
    """A task as its jobs run: its lease, whether it runs plain (rule 1), whether its
    arguments are validated into models, its numbers (tally.py)."""

    task: TaskSpec
    lease_ms: int
    plain: bool
    loads: bool
    tally: TaskTally


# a decoded job: its task (as its jobs run), its call, whether it is a flow parent, whether
# it runs plain
Plan = tuple[_Known, Call, bool, bool]


@attrs.define(eq=False)
class JobRunner:
    """Runs claimed jobs for one worker (the slot pool calls :meth:`run` per job)."""

    queue: QueueSpec
    conn: Executor  # an echomq.Connection (tests may wrap it)
    settler: Settler
    counters: Counters
    processes: ProcessPool = attrs.field(factory=ProcessPool)
    hooks: Hooks | None = None  # the queue's (rule 5)
    # task name -> what its jobs need (``_first_job``): read once per task
    _known: dict[str, _Known] = attrs.field(factory=dict, init=False)
    _codec: Codec = attrs.field(init=False)  # the queue's, read once

    def __attrs_post_init__(self) -> None:
        self._codec = self.queue.codec

    async def run(self, claimed: Claimed, held: Held) -> None:
        """Rule 1: run the job, then hand its outcome to the settler."""
        settler = self.settler
        # lost, fenced or shut down before it started (a prefetched job waits for its
        # slot: claims.py rule 5): never run
        runs = held.stop is None or held.stop is Stop.CANCEL
        if runs and _tracing.ENABLED and _tracing.on():  # docs/observability.md
            await self._traced(claimed, held)
            return
        try:
            outcome: Outcome = await self._execute(claimed, held) if runs else None
        except BaseException:  # the worker's own cancellation (or a bug): not settled
            settler.unsettled(held)
            raise
        if held.job is None and self.hooks is not None and self.hooks.runs:
            held.job = self._job_of(held.task or "", claimed, held)  # it did not run
        settlement = settler.take(held, outcome)
        if settlement is not None:
            await settler.settle(held, settlement)

    async def _traced(self, claimed: Claimed, held: Held) -> None:
        """:meth:`run`'s steps inside the run's span, a child of the enqueue's. A failure is
        settled inside it, so its outcome is what the server decided (retried or dead); a
        batched completion is recorded after the span ends, its outcome the one the run
        asked for."""
        settler = self.settler
        with _tracing.processing(
            self.queue.name, claimed.id, claimed.token, decode_headers(claimed.headers)
        ) as span:
            try:
                s = await self._execute(claimed, held)
            except BaseException:
                settler.unsettled(held)
                raise
            if held.job is None and self.hooks is not None and self.hooks.runs:
                held.job = self._job_of(held.task or "", claimed, held)
            settlement = settler.take(held, s)
            if settlement is not None:
                await settler.settle(held, settlement)
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
                span.outcome(task, held.recorded or "retried", s.error)

    async def _execute(self, claimed: Claimed, held: Held) -> Outcome:
        """Decode, plan, run the handler in its slot scope; answer how it ends."""
        plan = self._plan(claimed, held)
        if isinstance(plan, Settlement):  # it ends before it runs
            return plan
        known, call, is_parent, plain = plan
        task = known.task
        limit = soft_at = None
        around: Sequence[Any] = ()
        if plain:  # rule 1: the Job made only when asked for
            job: Job | None = None
            args = call.args
            if task.wants_job:
                job = self._job(task, claimed, held)
                args = (job, *args)
            bound = bind(job if job is not None else _Deferred(self, task, claimed, held))
        else:
            prepared = await self._prepare(claimed, held, task, call.args, is_parent)
            if isinstance(prepared, Settlement):
                return prepared
            job, args, limit, soft_at = prepared
            bound = bind(job)
            hooks = self.hooks
            if hooks is not None and hooks.runs:  # rule 5
                held.job = job
                around = hooks.around
        scope = held.slot
        assert scope is not None  # (a slot task's: pool.py)
        started = perf_counter()
        waited_ms = claimed.waited_ms
        if waited_ms is not None:  # tally.py rule 3
            known.tally.wait(waited_ms / 1000 + (started - held.claimed_at))
        try:
            if held.stop is not None:  # a cancel request reached it before it ran
                scope.cancel()
            if limit is not None:  # rule 3: its timeout is the slot scope's deadline
                scope.limit(limit)
            held.running = scope
            try:
                if plain:
                    value = await task.fn(*args, **call.kwargs)
                elif around:
                    assert job is not None
                    invoke = functools.partial(
                        self._invoke, task, held, args, call.kwargs, limit, soft_at
                    )
                    value = await run_around(around, job, invoke)
                else:
                    value = await self._invoke(task, held, args, call.kwargs, limit, soft_at)
            except BaseException as exc:  # rule 4: only trio's Cancelled passes
                held.running = None
                return self._ended(task, claimed, held, scope, exc, None, limit)
            held.running = None
            if limit is None and scope.clean():  # (pool.py rule 5: nothing to look at)
                return self._encode(claimed, value)
            return self._ended(task, claimed, held, scope, None, value, limit)
        finally:
            unbind(bound)
            held.ran = perf_counter() - started

    def _plan(self, claimed: Claimed, held: Held) -> Plan | Settlement:
        """The decoded payload and its task: ``(known, call, is a flow parent, plain)``;
        or the settlement of a job that ends before it runs (a payload that cannot be
        decoded, no such task)."""
        is_parent, payload = split_payload(claimed.payload)
        failed_with = fed = None
        try:
            if payload[:1] == b"\x00":  # an error callback's, a fed group member's
                failed_with, payload = split_errback(payload)
                fed, payload = split_fed(payload)
            call = self._codec.decode_call(payload)
            if fed is not None:  # the step before's result, first
                call = call._replace(args=(self._codec.decode_result(fed), *call.args))
        except Exception as exc:  # a custom codec's own error is the job's too
            return undecodable(claimed.id, exc, "the payload could not be decoded")
        if failed_with is not None:  # the failed job's id and error, for the stand-ins
            call = call._replace(args=(*failed_with, *call.args[2:]))
        name = held.task = call.task
        task = self.queue.tasks.get(name)
        if task is None:
            task = BUILTINS.get(name)
        if task is None:
            error = f"TaskNotRegistered: no task named {name!r} on queue {self.queue.name!r}"
            delay = backoff_ms(default_backoff, claimed.failures + 1)
            return Settlement(
                complete=False, error=clip(error, MAX_ERROR_TEXT), retry_delay_ms=delay
            )
        known = self._known.get(name)
        if known is None or known.task is not task:  # a task's first job: what it needs
            known = self._known[name] = self._first_job(task)
        held.lease_ms = known.lease_ms
        if known.loads:
            try:
                call = task.load_call(call)
            except Exception as exc:  # an argument that does not fit its annotation
                return undecodable(claimed.id, exc, "the arguments do not fit the task")
        plain = known.plain and not is_parent
        if plain and self.hooks is not None and self.hooks.runs:
            plain = False  # rule 5: its Job is made
        return known, call, is_parent, plain

    def _first_job(self, task: TaskSpec) -> _Known:
        """What a task's jobs need, read at its first job (then kept: ``_known``)."""
        opts = task.options
        return _Known(
            task=task,
            lease_ms=opts.lease_ms,
            plain=task.is_async and opts.timeout is None and opts.soft_timeout is None,
            loads=task.loads_models,
            tally=self.settler.tally_of(self.queue.name).task(task.name),
        )

    async def _prepare(
        self, claimed: Claimed, held: Held, task: TaskSpec, args: tuple[Any, ...], parent: bool
    ) -> tuple[Job, tuple[Any, ...], float | None, float | None] | Settlement:
        """A run that is not plain: its ``Job`` (a flow parent's with its children's
        results, fed to it as its policy says), its arguments, its time limits (trio time:
        the hard deadline, the soft one)."""
        results: list[Any] | None = None
        if parent:  # a flow parent: its children's outcomes, its policy (docs/flows.md)
            inputs = await self._children(claimed)
            if isinstance(inputs, Settlement):
                return inputs
            results, feed = inputs
            if feed is Feed.ONE:
                args = (results[0] if results else None, *args)
            elif feed is Feed.ALL:
                args = (list(results), *args)
        job = self._job(task, claimed, held, results)
        if task.wants_job:
            args = (job, *args)
        timeout, soft = task.options.timeout, task.options.soft_timeout
        start = trio.current_time()
        limit = None if timeout is None else start + timeout
        soft_at = None if soft is None else start + soft
        return job, args, limit, soft_at

    def _ended(
        self,
        task: TaskSpec,
        claimed: Claimed,
        held: Held,
        scope: SlotScope,
        exc: BaseException | None,
        value: Any,
        deadline: float | None,
    ) -> Outcome:
        """How a run ends once its handler returned ``value`` or raised ``exc`` (rule 4):
        what the slot scope found (``pool.py`` rule 5) first, then what the handler did.
        Called before any checkpoint, in the ``except`` block of ``exc``."""
        failure = None if exc is None else failure_of(exc)
        if failure is not None:
            held.exception = failure  # (the outcome hooks')
        ending = scope.end(exc, exc is not None and failure is None)
        if ending is Ending.HANDLER:
            if failure is not None:
                assert exc is not None
                return raised(task, claimed.id, claimed.failures, held, failure, exc, deadline)
            if deadline is not None and trio.current_time() >= deadline:
                return timed_out(task, claimed.failures)  # rule 3: it blocked past it
            return self._encode(claimed, value)
        if ending is Ending.STOPPED:
            return cancelled(held)
        if ending is Ending.TIMED_OUT:
            return timed_out(task, claimed.failures)
        if ending is Ending.PASSED:
            assert exc is not None
            raise exc
        # the job broke trio's rules (pool.py rule 5): its failure, what it raised noted
        error = ending.value
        tb = None
        if failure is not None:
            error = with_reason(error, f"it raised {error_text(failure, REASON_ROOM)}")
        if exc is not None:
            tb = traceback_line(exc)
        log.warning("job %s (%s): %s%s", claimed.id, task.name, error, f"\n{tb}" if tb else "")
        return failed(task, claimed.failures, error, tb)

    def _job(
        self, task: TaskSpec, claimed: Claimed, held: Held, children: list[Any] | None = None
    ) -> Job:
        """The ``Job`` context of a run (``children``: a flow parent's inputs)."""
        return self._job_of(task.name, claimed, held, children)

    def _job_of(
        self, task: str, claimed: Claimed, held: Held, children: list[Any] | None = None
    ) -> Job:
        return Job(
            id=claimed.id,
            task=task,
            queue=self.queue.name,
            attempt=claimed.token,
            token=claimed.token,
            failures=claimed.failures,
            cancel_token=held.cancel_token,
            conn=self.conn,
            lease_ms=held.lease_ms,
            lose=held.lose,
            children=children,
            codec=self.queue.codec,
            slept=held.slept,
            headers=decode_headers(claimed.headers),
        )

    def _encode(self, claimed: Claimed, value: Any) -> bytes | Settlement:
        """The job's result as stored, or (a value the codec refuses) its dead-letter."""
        try:
            return self._codec.encode_result(value)
        except Exception as exc:  # as for decoding
            return undecodable(claimed.id, exc, "the result could not be encoded")

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
                return undecodable(claimed.id, exc, f"child {outcome.id}'s result")
        return values, Feed(kids.feed)

    async def _invoke(
        self,
        task: TaskSpec,
        held: Held,
        args: tuple[Any, ...],
        kwargs: Any,
        deadline: float | None,
        soft_at: float | None,
    ) -> Any:
        """Call a handler that is not plain: an async one under its soft limit, a sync one
        in a thread or a process child (rule 3)."""
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
