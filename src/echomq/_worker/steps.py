"""A running job's durable steps (docs/steps.md): what ``Job.step`` and ``Job.sleep`` do.

Rule 1 (once per job): a step whose record is committed is not run again; a later run
answers its stored value (or, for a step that failed with an error it was told to keep,
raises :class:`~echomq.errors.StepFailed`). The records are read once per run, at its
first step, and only for a run that can have any (not the job's first claim).
Rule 2 (fenced): a record is committed by the holder of the current claim only
(``commit_step.lua``). A refused commit means the lease is gone: the job is lost
(``Held.lose``), as when the lease keeper sees it, and the step raises what refused it.
Rule 3 (the order): the step runs, then its record is committed, then ``step`` returns.
A crash between the two runs the step again in the next run: the step itself is
at-least-once, which is what :func:`~echomq._model.steps.step_key` is for.
Rule 4 (sleep): ``sleep`` commits its step and schedules the job in one script; the run
then stops (``Held.defer``: its slot freed, nothing settled), and the next run goes on
past the step.
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from time import perf_counter
from typing import Any, TypeVar

import attrs
import trio
import trio.lowlevel

from .._model.cancel import CancelToken
from .._model.codec import Codec
from .._model.steps import StepRecord, check_name
from .._model.text import error_text
from .._scripts.calls import Executor
from ..errors import (
    DuplicateStep,
    InvalidArgument,
    JobCancelled,
    JobGone,
    NotActive,
    StaleToken,
    StepFailed,
)
from ..jobs import steps as verbs

__all__ = ["Steps"]

T = TypeVar("T")
_LOST = (StaleToken, NotActive, JobGone)


@attrs.define(eq=False)
class Steps:
    """The steps of one run of one job."""

    conn: Executor
    queue: str
    job_id: str
    token: int
    codec: Codec
    lose: Callable[[], None]
    defer: Callable[[], None]
    first_claim: bool  # the job's first claim: no step can be stored yet
    cancel_token: CancelToken
    _stored: dict[str, StepRecord] | None = attrs.field(default=None, init=False)
    _seen: set[str] = attrs.field(factory=set, init=False)

    def _use(self, name: object) -> str:
        name = check_name(name)
        if name in self._seen:
            raise DuplicateStep(f"step {name!r} was already used in this run of job {self.job_id}")
        self._seen.add(name)
        return name

    async def stored(self) -> dict[str, StepRecord]:
        """The steps committed by earlier runs (read once)."""
        if self._stored is None:
            if self.first_claim:
                self._stored = {}
            else:
                self._stored = await verbs.read_steps(self.conn, self.queue, self.job_id)
        return self._stored

    def _replay(self, record: StepRecord) -> Any:
        if record.state == "failed":
            raise StepFailed(record.name, record.error or "")
        return self.codec.decode_result(record.value) if record.value else None

    async def run(
        self,
        name: str,
        fn: Callable[..., Awaitable[T] | T],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        keep_errors: tuple[type[BaseException], ...],
    ) -> T:
        name = self._use(name)
        record = (await self.stored()).get(name)
        if record is not None:  # rule 1
            return self._replay(record)  # type: ignore[no-any-return]
        started = perf_counter()
        try:
            value = fn(*args, **kwargs)
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:
            kept = self._kept_error(name, started, exc, keep_errors)
            if kept is not None:
                await self._commit(kept)
            raise
        await self._commit(self._done(name, started, value))
        return value

    def run_sync(
        self,
        name: str,
        fn: Callable[..., T],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        keep_errors: tuple[type[BaseException], ...],
    ) -> T:
        """:meth:`run` for a sync task's thread: ``fn`` runs in that thread, the reads and
        the commit on the worker's event loop (``trio.from_thread``)."""
        name = trio.from_thread.run_sync(self._use, name)
        record = trio.from_thread.run(self.stored).get(name)
        if record is not None:  # rule 1
            return self._replay(record)  # type: ignore[no-any-return]
        started = perf_counter()
        try:
            value = fn(*args, **kwargs)
        except Exception as exc:
            kept = self._kept_error(name, started, exc, keep_errors)
            if kept is not None:
                trio.from_thread.run(self._commit, kept)
            raise
        trio.from_thread.run(self._commit, self._done(name, started, value))
        return value

    def _done(self, name: str, started: float, value: Any) -> StepRecord:
        """A done step's record: its value encoded by the queue's codec."""
        encoded = self.codec.encode_result(value)
        return StepRecord(
            name=name,
            state="done",
            token=self.token,
            ms=_ms(started),
            at_ms=_now_ms(),
            value=encoded,
        )

    def _kept_error(
        self,
        name: str,
        started: float,
        exc: Exception,
        keep_errors: tuple[type[BaseException], ...],
    ) -> StepRecord | None:
        """A failed step's record when ``exc`` is one of the errors it keeps, else None."""
        if not (keep_errors and isinstance(exc, keep_errors)):
            return None
        return StepRecord(
            name=name,
            state="failed",
            token=self.token,
            ms=_ms(started),
            at_ms=_now_ms(),
            error=error_text(exc),
        )

    async def _commit(self, record: StepRecord) -> None:
        try:
            await verbs.commit_step(self.conn, self.queue, self.job_id, self.token, record)
        except _LOST:
            self.lose()
            await trio.lowlevel.checkpoint()  # the job's scope is cancelled now: it stops here
            raise

    async def sleep(self, name: str, duration: timedelta | float) -> None:
        name = self._use(name)
        seconds = duration.total_seconds() if isinstance(duration, timedelta) else duration
        if type(seconds) not in (int, float) or not math.isfinite(seconds) or seconds < 0:
            raise InvalidArgument(f"a sleep is a finite, non-negative duration: {duration!r}")
        if name in await self.stored():
            return  # rule 4: an earlier run slept here
        ms = max(1, math.ceil(seconds * 1000))
        try:
            slept = await verbs.sleep(self.conn, self.queue, self.job_id, self.token, name, ms)
        except _LOST:
            self.lose()
            await trio.lowlevel.checkpoint()
            raise
        if slept == 1:
            return
        if slept == 0:  # a cancel request came first: the job ends cancelled
            raise JobCancelled(self.cancel_token.reason)
        self.defer()
        await trio.lowlevel.checkpoint()  # the job's scope is cancelled: the run stops here


def _ms(started: float) -> float:
    return round((perf_counter() - started) * 1000, 3)


def _now_ms() -> int:
    return int(time.time() * 1000)
