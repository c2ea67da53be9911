"""Run one claimed job in its own ``trio.CancelScope`` and settle its outcome.

Rule 1: one job, one scope. Only :mod:`.cancellation` cancels it, for a remote reason:
a cancel request (the job completes with ``cancelled:<reason>``, never retried), a lost
lease (the outcome is never settled: a newer holder owns the job), a shutdown past grace
(the job is handed back to pending by the worker, in one batch).
Rule 2: the outcome is settled under a shielded scope with a bounded timeout;
``ConnectionLost`` is retried with backoff inside that bound (``complete`` is idempotent
for the same token; a ``fail`` that did land answers ``NotActive``/``StaleToken`` the
second time, which also means "done"). A refusal means the lease was lost: logged, never
retried, never forced.
Rule 3: a handler error is the job's failure, never the worker's: it is logged with its
traceback and written to the job's log list; ``last_error`` is ``Type: message``.
"""

from __future__ import annotations

import functools
import logging
import math
import traceback
from collections.abc import Callable
from typing import Any

import attrs
import trio

from .. import jobs
from .._model.job import Claimed
from ..app import Job, Queue, Task, cancelled_result
from ..errors import (
    ConnectionLost,
    JobCancelled,
    JobGone,
    NotActive,
    Retry,
    SerializationError,
    StaleToken,
)
from .backoff import default_backoff, delay_for
from .cancellation import Held, InFlight, Stop
from .processes import ProcessPool

__all__ = ["Counters", "JobRunner", "Settlement"]

log = logging.getLogger("echomq.worker")

_LOST = (StaleToken, NotActive, JobGone)


@attrs.frozen(kw_only=True)
class Settlement:
    """How a job ends this attempt: ``complete`` (with a result) or ``fail``."""

    complete: bool
    result: bytes = b""
    error: str = ""
    retry_delay_ms: int = 0
    dead: bool = False
    cancelled: bool = False
    traceback: str | None = None


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


def _error_text(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@attrs.define(eq=False)
class JobRunner:
    """Runs claimed jobs for one worker; the consumer starts :meth:`run` per job."""

    queue: Queue
    conn: Any  # echomq.Connection (Any: tests may wrap it)
    inflight: InFlight
    on_done: Callable[[], None]
    settle_timeout: float = 10.0
    counters: Counters = attrs.field(factory=Counters)
    to_release: list[tuple[str, int]] = attrs.field(factory=list)
    processes: ProcessPool = attrs.field(factory=ProcessPool)

    async def run(self, claimed: Claimed, held: Held) -> None:
        """Execute, settle, and free the slot; hand the job back if it was not settled."""
        settled = False
        try:
            settlement = await self._execute(claimed, held)
            if settlement is not None and held.stop is not Stop.LOST:
                held.settling = True
                settled = await self._settle(held, settlement)
            elif held.stop is Stop.LOST:
                self.counters.lost += 1
                log.warning("job %s lost its lease; its outcome is not settled", held.id)
        finally:
            self.inflight.remove(held)
            if not settled and held.stop is not Stop.LOST:
                # a shutdown past grace (or the worker cancelled from outside): hand back
                self.to_release.append((held.id, held.token))
            self.on_done()

    async def _execute(self, claimed: Claimed, held: Held) -> Settlement | None:
        queue = self.queue
        try:
            call = queue.codec.decode_call(claimed.payload)
        except SerializationError as exc:
            return Settlement(complete=False, error=_error_text(exc), dead=True)
        task = queue.tasks.get(call.task)
        if task is None:
            error = f"TaskNotRegistered: no task named {call.task!r} on queue {queue.name!r}"
            delay = delay_for(default_backoff, claimed.failures + 1)
            return Settlement(complete=False, error=error, retry_delay_ms=round(delay * 1000))
        held.lease_ms = task.options.lease_ms
        job = Job(
            id=claimed.id,
            task=task.name,
            queue=queue.name,
            attempt=claimed.failures + 1,
            token=claimed.token,
            cancel_token=held.cancel_token,
            conn=self.conn,
            lease_ms=held.lease_ms,
            lose=held.lose,
        )
        settlement: Settlement | None = None
        timeout = task.options.timeout
        with held.scope, job._bind():
            try:
                if timeout is None:
                    value = await self._invoke(task, held, job, call.args, call.kwargs, None)
                else:
                    deadline = trio.current_time() + timeout
                    with trio.fail_at(deadline):
                        value = await self._invoke(
                            task, held, job, call.args, call.kwargs, deadline
                        )
            except Retry as ask:
                settlement = self._retry(task, claimed, ask)
            except JobCancelled as exc:
                reason = exc.reason if exc.reason is not None else held.cancel_token.reason
                settlement = Settlement(
                    complete=True, result=cancelled_result(reason), cancelled=True
                )
            except trio.TooSlowError:
                settlement = self._failure(
                    task, claimed, f"TimeoutError: ran longer than {timeout:g} s", None
                )
            except Exception as exc:
                log.warning("job %s (%s) raised", claimed.id, task.name, exc_info=True)
                settlement = self._failure(task, claimed, _error_text(exc), traceback.format_exc())
            else:
                try:
                    result = queue.codec.encode_result(value)
                except SerializationError as exc:
                    settlement = Settlement(complete=False, error=_error_text(exc), dead=True)
                else:
                    settlement = Settlement(complete=True, result=result)
        if settlement is None:  # the scope caught a cancellation of ours
            if held.stop is Stop.CANCEL:
                reason = held.cancel_token.reason
                return Settlement(complete=True, result=cancelled_result(reason), cancelled=True)
            return None
        return settlement

    async def _invoke(
        self,
        task: Task,
        held: Held,
        job: Job,
        args: tuple[Any, ...],
        kwargs: Any,
        deadline: float | None,
    ) -> Any:
        if task.wants_job:
            args = (job, *args)
        if task.is_async:
            return await task.fn(*args, **kwargs)
        # A thread cannot be interrupted: a cancel request waits for it (the code may poll
        # current_job().cancel_token); a lost lease, a shutdown past grace or the timeout
        # abandon it (it runs on, but its outcome is never used).
        # A process task is the same, in a child process (``process=True``).
        hard = trio.CancelScope(shield=True, deadline=math.inf if deadline is None else deadline)
        held.hard_scope = hard
        with hard:
            if task.options.process:
                fn = task.fn
                return await self.processes.run(fn.__module__, fn.__qualname__, args, kwargs)
            return await trio.to_thread.run_sync(
                functools.partial(task.fn, *args, **kwargs), abandon_on_cancel=True
            )
        await trio.lowlevel.checkpoint()  # abandoned: deliver the cancel that caused it

    def _failure(self, task: Task, claimed: Claimed, error: str, tb: str | None) -> Settlement:
        delay = delay_for(task.options.backoff, claimed.failures + 1)
        return Settlement(
            complete=False, error=error, retry_delay_ms=round(delay * 1000), traceback=tb
        )

    def _retry(self, task: Task, claimed: Claimed, ask: Retry) -> Settlement:
        if ask.delay is not None:
            delay = max(0.0, float(ask.delay))
        else:
            delay = delay_for(task.options.backoff, claimed.failures + 1)
        return Settlement(
            complete=False, error=f"Retry: {ask.reason}", retry_delay_ms=round(delay * 1000)
        )

    async def _settle(self, held: Held, settlement: Settlement) -> bool:
        """Record the outcome; True once the server took it (or already had it)."""
        with trio.CancelScope(shield=True), trio.move_on_after(self.settle_timeout):
            delay = 0.02
            while True:
                try:
                    await self._apply(held, settlement)
                    return True
                except _LOST as exc:
                    self.counters.lost += 1
                    log.warning(
                        "job %s: settling refused (%r); a newer holder owns it", held.id, exc
                    )
                    return True  # never retried, never handed back
                except ConnectionLost as exc:
                    log.warning("job %s: settling failed (%s); retrying", held.id, exc)
                    await trio.sleep(delay)
                    delay = min(delay * 2, 1.0)
        log.error(
            "job %s: could not settle within %.1f s; its lease will lapse and recovery returns it",
            held.id,
            self.settle_timeout,
        )
        return True  # do not also hand it back: the recovery sweep owns it now

    async def _apply(self, held: Held, s: Settlement) -> None:
        conn, name = self.conn, self.queue.name
        if s.complete:
            await jobs.complete(conn, name, held.id, held.token, s.result)
            if s.cancelled:
                self.counters.cancelled += 1
            else:
                self.counters.completed += 1
            return
        if s.traceback is not None:
            try:
                await jobs.add_log(conn, name, held.id, s.traceback.rstrip())
            except JobGone:
                pass
        outcome = await jobs.fail(
            conn, name, held.id, held.token, s.error, retry_delay_ms=s.retry_delay_ms, dead=s.dead
        )
        if outcome == "dead":
            self.counters.failed += 1
        else:
            self.counters.retried += 1
