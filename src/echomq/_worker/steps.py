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
Rule 5 (dynamic children; docs/flows.md): ``spawn`` is a step too: its children and its
record (their root ids) are written in one fenced script, once per job; their ids are
drawn from the job's id, the step's name and their place (:func:`spawn_id`), so a later
run names the same jobs. ``wait_children`` moves the job to ``waiting`` while some are
open (the run stops as for a sleep, and the last child's finish makes it pending); the
run that finds none open reads their results.
"""

from __future__ import annotations

import hashlib
import inspect
import itertools
import math
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from time import perf_counter
from typing import Any, Protocol, TypeVar

import attrs
import trio
import trio.lowlevel

from .._model.cancel import CancelToken
from .._model.codec import Codec
from .._model.errback import decode_spec
from .._model.flow import FlowJob, Policy, children_values, fed_payload
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
from ..flows import FlowChildren, Spawn, children, spawn_children, wait_children
from ..jobs import steps as verbs

__all__ = ["Spawnable", "Steps", "spawn_id"]


class Spawnable(Protocol):
    """What ``job.spawn`` takes: a canvas (a signature, chain, group, chord or flow)."""

    def flow_jobs(self, *, ids: Callable[[], str] | None = None) -> list[FlowJob]: ...


def spawn_id(job_id: str, step: str, n: int) -> str:
    """The id of the ``n``-th job a spawn step draws (rule 5): the same in every run."""
    return hashlib.sha256(f"{job_id}\0{step}\0{n}".encode()).hexdigest()[:32]


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
    _spawns: int = attrs.field(default=0, init=False)  # spawn steps of this run

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

    async def spawn(self, canvases: list[Spawnable], name: str | None, policy: str) -> list[str]:
        """Rule 5: add ``canvases`` as children of the job, once per job; answer their
        root ids."""
        self._spawns += 1
        name = self._use(f"spawn-{self._spawns}" if name is None else name)
        try:
            chosen = Policy(policy)
        except ValueError:
            raise InvalidArgument(
                f"policy must be one of {[p.value for p in Policy]}, not {policy!r}"
            ) from None
        if not canvases:
            raise InvalidArgument("spawn needs at least one signature")
        drawn = itertools.count()

        def ids() -> str:
            return spawn_id(self.job_id, name, next(drawn))

        roots: list[FlowJob] = []
        for canvas in canvases:
            if not callable(getattr(canvas, "flow_jobs", None)):
                raise InvalidArgument(f"spawn takes signatures and canvases, not {canvas!r:.80}")
            roots += canvas.flow_jobs(ids=ids)
        return await self._spawn(roots, name, chosen)

    async def _spawn(self, roots: list[FlowJob], name: str, chosen: Policy) -> list[str]:
        root_ids = [r.id for r in roots]
        record = StepRecord(
            name=name,
            state="done",
            token=self.token,
            at_ms=_now_ms(),
            value=self.codec.encode_result(root_ids),
        )
        spawn = Spawn(self.queue, self.job_id, self.token, name, record.encode(), chosen)
        try:
            await spawn_children(self.conn, spawn, roots)
        except _LOST:
            self.lose()
            await trio.lowlevel.checkpoint()
            raise
        return root_ids

    async def wait_children(self) -> list[Any]:
        """Rule 5: wait (the run stops) while a spawned child is open; else their results
        as the policy says."""
        kids = await self._wait()
        return children_values(kids.outcomes, Policy(kids.policy), self.codec.decode_result)

    async def group(self, members: list[list[Any]]) -> list[Any]:
        """A group in the middle of a chain (docs/flows.md; ``builtins.py``): spawn its
        members, each given the result of the job's first child (the step before) first
        unless immutable, wait for them, answer their results in order."""
        kids = await children(self.conn, self.queue, self.job_id)
        policy = Policy(kids.policy)
        if not members:  # a group's collector (two groups in a row): its children's list
            return children_values(kids.outcomes, policy, self.codec.decode_result)
        first = kids.outcomes[0] if kids.outcomes else None
        fed = first.data if first is not None and first.state == "completed" else None
        value = self.codec.encode_result(None) if fed is None else fed
        roots: list[FlowJob] = []
        for takes, spec in members:
            queue, new = decode_spec(spec)
            if takes:
                payload = new.payload if isinstance(new.payload, bytes) else new.payload.encode()
                new = attrs.evolve(new, payload=fed_payload(value, payload))
            roots.append(FlowJob(job=new, queue=queue))
        self._use("group")
        await self._spawn(roots, "group", policy)
        done = await self._wait()
        by_id = dict(zip(done.ids, done.outcomes, strict=True))
        outcomes = [by_id.get(r.id) for r in roots]
        return children_values(outcomes, policy, self.codec.decode_result)

    async def _wait(self) -> FlowChildren:
        try:
            answer = await wait_children(self.conn, self.queue, self.job_id, self.token)
        except _LOST:
            self.lose()
            await trio.lowlevel.checkpoint()
            raise
        if answer == 0:  # a cancel request came first: the job ends cancelled
            raise JobCancelled(self.cancel_token.reason)
        if answer == 2:
            self.defer()
            await trio.lowlevel.checkpoint()  # the job's scope is cancelled: it stops here
        return await children(self.conn, self.queue, self.job_id)


def _ms(started: float) -> float:
    return round((perf_counter() - started) * 1000, 3)


def _now_ms() -> int:
    return int(time.time() * 1000)
