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
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import attrs
import trio

from .. import jobs
from .._model.cancel import CancelToken
from .._scripts.calls import Executor
from ..errors import TRANSIENT, JobGone, NotActive, StaleToken

__all__ = ["Deferred", "Job", "bind", "current_job", "unbind"]

log = logging.getLogger("echomq")

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

    ``attempt`` is 1 on the first try and grows with each failure (a retry); ``token``
    is the fencing token of this claim (it also grows when a lease is recovered).
    """

    id: str
    task: str
    queue: str
    attempt: int
    token: int
    cancel_token: CancelToken
    _conn: Executor = attrs.field(repr=False)
    _lease_ms: int = attrs.field(repr=False)
    _lose: Callable[[], None] = attrs.field(repr=False)
    _children: list[Any] | None = attrs.field(default=None, repr=False)
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
