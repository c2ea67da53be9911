"""The :class:`Job` context a task sees while it runs, and ``current_job()``.

Rule 1: the worker makes one ``Job`` per claim (``run.py``) and binds it to a context
variable for the duration of the handler, so ``current_job()`` answers it from anywhere
inside the job, a sync task's thread included.
Rule 2: a ``Job`` reaches Redis only through the verbs (``progress``, ``log``,
``checkpoint``); it never settles the job: the worker does.
Rule 3: a lost lease seen by ``checkpoint()`` goes to the held-job table (``Held.lose``),
as if the lease keeper had seen it.
Rule 4: a task that does not take the ``Job`` may never ask for it: the worker then binds
a :class:`Deferred` (``bind_deferred``), and ``current_job()`` makes the ``Job`` at its first
call (once: later calls answer the same one).
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, ParamSpec, Protocol, TypeVar

import attrs
import trio

from .. import jobs
from .._model.cancel import CancelToken
from .._model.codec import Codec
from .._model.steps import check_name, step_key
from .._scripts.calls import Executor
from ..errors import TRANSIENT, JobGone, NotActive, StaleToken
from .steps import Spawnable, Steps

__all__ = ["Deferred", "Job", "bind", "current_job", "unbind"]

log = logging.getLogger("echomq")

P = ParamSpec("P")
T = TypeVar("T")

_current: contextvars.ContextVar[Job | Deferred] = contextvars.ContextVar("echomq_current_job")


class Deferred(Protocol):
    """What makes a job's :class:`Job` when first asked for (rule 4)."""

    def job(self) -> Job:
        """The job's ``Job`` (the same one at every call)."""
        ...


def current_job() -> Job:
    """The :class:`Job` this code runs in (also inside a sync task's thread).

    Raises:
        RuntimeError: called outside a job.
    """
    try:
        job = _current.get()
    except LookupError:
        raise RuntimeError("current_job() was called outside a running job") from None
    return job if isinstance(job, Job) else job.job()


@attrs.define(eq=False)
class Job:
    """The running job, as its task sees it.

    ``attempt`` is the run number: 1 for the job's first run, one more for every later
    run, whatever ended the one before (a failure and its retry, a stalled lease
    recovered, a job handed back at a worker's stop). ``failures`` counts the handler
    failures before this run (what ``max_attempts`` bounds: Celery's
    ``request.retries``). ``token`` is the fencing token of this claim; while the job
    runs it equals ``attempt`` (every claim grows it by one; only a fenced cancel, which
    ends the job, grows it otherwise).
    """

    id: str
    task: str
    queue: str
    attempt: int
    token: int
    failures: int
    cancel_token: CancelToken
    _conn: Executor = attrs.field(repr=False)
    _lease_ms: int = attrs.field(repr=False)
    _lose: Callable[[], None] = attrs.field(repr=False)
    _children: list[Any] | None = attrs.field(default=None, repr=False)
    _codec: Codec | None = attrs.field(default=None, repr=False)
    _slept: Callable[[], None] | None = attrs.field(default=None, repr=False)
    _steps: Steps | None = attrs.field(default=None, init=False, repr=False)
    #: the job's headers (``before_enqueue`` hooks', the trace context's): read-only
    headers: Mapping[str, str] = attrs.field(factory=dict, kw_only=True)

    def children_results(self) -> list[Any]:
        """A flow parent's children's results, in the children's order (docs/flows.md):
        under policy ``ignore`` only those that completed; under ``continue`` a
        :class:`~echomq.flows.ChildFailure` stands for each that did not. Empty for a
        job that is not a flow parent."""
        return list(self._children or ())

    @property
    def is_parent(self) -> bool:
        """True when this job is a flow parent (it waited for children)."""
        return self._children is not None

    @property
    def cancelled(self) -> bool:
        """True once a cancel was requested (the handler stops at its next checkpoint)."""
        return self.cancel_token.cancelled

    async def progress(self, value: str | int | float) -> None:
        """Write the row's ``progress`` and publish a ``progress`` event."""
        await jobs.update_progress(self._conn, self.queue, self.id, value)

    async def log(self, line: str, *, keep: int | None = None) -> int:
        """Append a line to the job's log list; answer the number of lines kept."""
        return await jobs.add_log(self._conn, self.queue, self.id, line, keep=keep)

    def _step_log(self) -> Steps:
        steps = self._steps
        if steps is None:
            if self._codec is None or self._slept is None:
                raise RuntimeError("durable steps need a job run by a worker")
            steps = self._steps = Steps(
                conn=self._conn,
                queue=self.queue,
                job_id=self.id,
                token=self.token,
                codec=self._codec,
                lose=self._lose,
                defer=self._slept,
                first_claim=self.token == 1,
                cancel_token=self.cancel_token,
            )
        return steps

    async def step(
        self,
        name: str,
        fn: Callable[P, Awaitable[T]] | Callable[P, T],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """Run ``fn(*args, **kwargs)`` once per job, across retries and recoveries
        (docs/steps.md).

        The first run that gets past it commits its value, fenced by this claim's token,
        before this returns; every later run of the job answers that value without calling
        ``fn``. ``fn`` may be a coroutine function or a plain one (a plain one runs here, on
        the event loop: keep it quick, or make it async). A step that raises commits
        nothing, so a retry runs it again; see :meth:`step_keeping_errors` to keep an error.

        Raises:
            InvalidArgument: a bad name; DuplicateStep: the name was used in this run.
            PayloadTooLarge, SerializationError: a value the codec cannot store.
            StaleToken, NotActive, JobGone: the lease is gone (the job stops).
        """
        return await self._step_log().run(name, fn, args, kwargs, ())

    async def step_keeping_errors(
        self,
        name: str,
        errors: tuple[type[BaseException], ...],
        fn: Callable[P, Awaitable[T]] | Callable[P, T],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """:meth:`step`, and an exception of one of ``errors`` is committed as the step's
        outcome too: later runs raise :class:`~echomq.errors.StepFailed` for it without
        calling ``fn`` (an answer that a retry cannot change, such as a declined card)."""
        return await self._step_log().run(name, fn, args, kwargs, tuple(errors))

    def step_sync(self, name: str, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """:meth:`step` for a sync task (``def`` rather than ``async def``): ``fn`` runs in
        the task's thread; its record is committed the same way."""
        return self._step_log().run_sync(name, fn, args, kwargs, ())

    async def sleep(self, name: str, duration: timedelta | float) -> None:
        """A durable sleep (docs/steps.md): the job goes back to the schedule for
        ``duration`` (a timedelta, or seconds) on the server's clock, its slot freed, and
        the next run goes on after this step. The code after it runs in that next run.

        Raises:
            InvalidArgument: a bad name or duration; DuplicateStep: the name was used in
            this run. JobCancelled: a cancel was requested before it slept.
        """
        await self._step_log().sleep(name, duration)

    async def spawn(
        self,
        children: Sequence[Spawnable],
        *,
        name: str | None = None,
        policy: str = "fail",
    ) -> list[str]:
        """Add ``children`` (signatures, chains, groups, chords, flows: each on any
        queue) as children of this running job, BullMQ's dynamic children (docs/flows.md
        "Dynamic children"); answer their root ids. A step: written once per job, fenced
        by this claim's token (``name``: the step's, ``spawn-<n>`` for the n-th spawn of
        the run); a later run of the job answers the same ids and adds nothing.
        ``policy``: what a child that does not complete does (as a flow's; the first
        spawn's stays).

        Raises:
            InvalidArgument: no child, a bad name or policy.
            DuplicateStep: the name was used in this run.
            StaleToken, NotActive, JobGone: the lease is gone (the job stops).
        """
        return await self._step_log().spawn(list(children), name, policy)

    async def wait_children(self) -> list[Any]:
        """Wait for the children this job spawned: while one is open the job leaves its
        slot for ``waiting`` and this run stops; the finish of the last one makes it
        pending, and its next run (which spawns nothing again) gets past here with their
        results in the children's order, as ``children_results()`` answers them after.

        Raises:
            ChildFailed: policy ``fail`` and a child that did not complete (the job dies).
            JobCancelled: a cancel was requested before it waited.
            StaleToken, NotActive, JobGone: the lease is gone (the job stops).
        """
        values = await self._step_log().wait_children()
        self._children = values
        return list(values)

    async def _group(self, members: list[list[Any]]) -> list[Any]:
        """The built-in group task's run (``builtins.py``)."""
        return await self._step_log().group(members)

    def step_key(self, name: str) -> str:
        """An idempotency key for step ``name``, the same in every run of this job: pass it
        to the APIs the step calls that take one, so a step repeated after a crash does
        its side effect once."""
        return step_key(self.queue, self.id, check_name(name))

    def shielded(self) -> trio.CancelScope:
        """A section a cancel request waits for: ``with job.shielded(): ...``."""
        return trio.CancelScope(shield=True)

    async def checkpoint(self) -> None:
        """Renew the lease now, then yield to Trio (where a pending cancel is delivered).

        A lost lease (the job was taken over) cancels the job: it is never settled.
        """
        try:
            await jobs.extend_lock(self._conn, self.queue, self.id, self.token, self._lease_ms)
        except (StaleToken, NotActive, JobGone):
            self._lose()
        except TRANSIENT as exc:
            log.warning("checkpoint of job %s: %s (the lease keeper will retry)", self.id, exc)
        await trio.lowlevel.checkpoint()


Bound = contextvars.Token["Job | Deferred"]


def bind(job: Job | Deferred) -> Bound:
    """Make ``job`` (or the one a :class:`Deferred` makes: rule 4) what ``current_job()``
    answers; :func:`unbind` with the token after.

    (A plain pair rather than a context manager: the worker binds one per job.)
    """
    return _current.set(job)


def unbind(token: Bound) -> None:
    _current.reset(token)
