"""Hooks: code of the application's run around every job of a queue (``queue.hooks``).

Rule 1 (the hooks): ``before_enqueue(enqueueing)`` on the producer side
(``_client/enqueue_hooks.py``: it may add headers, which reach ``Job.headers``);
``around_run(job, call_next)`` around each run, as middleware; ``on_complete``,
``on_retry``, ``on_dead`` and ``on_cancel`` ``(job, outcome)`` once the outcome is settled.
Each may be a plain function or an async one; several of a kind run in the order added.
Rule 2 (a hook's failure is never the job's, nor the worker's): a hook that raises (any
exception, ``SystemExit`` included) is logged and counted (:class:`HookErrors`, the
``echomq_hook_errors_total`` counter) and changes nothing else: the enqueue goes on, the
outcome stays as settled. Except ``around_run``: it is part of the run, so what it raises
is the job's failure (retried or dead by the task's backoff, ``last_error`` its text),
and what it answers is the job's result.
Rule 3 (bounded): ``around_run`` runs inside the job's slot, under the task's ``timeout``
like the handler, and is cancelled with it. The outcome hooks run after Redis took the
outcome, so they never delay a settle: a plain one is called inline on the worker's event
loop (it must not block: a blocked loop is the watchdog's ``blocks``), an async one runs
in a task of its own for at most ``Hooks.timeout`` seconds (then it is cancelled, logged
and counted). ``before_enqueue`` runs in the caller's enqueue (``enqueue_hooks.py``
rule 3).
Rule 4 (what the outcome hooks see): the job's ``Job`` (as its task saw it, ``headers``
included) and a :class:`JobOutcome`: how Redis settled it (``retried`` or ``dead`` is the
server's decision), the error text, the exception raised in this process when there was
one, the retry delay, the cancel reason. A job whose lease was lost has no outcome here
(a newer holder settles it); one fenced by a cancel's grace is ``on_cancel``.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, TypeVar

import attrs
import trio

from .._client.enqueue_hooks import BeforeEnqueue, Enqueueing, HookErrors
from .._model.options import seconds
from ..errors import InvalidArgument
from .context import Job

__all__ = [
    "HOOKS",
    "AroundRun",
    "BeforeEnqueue",
    "CallNext",
    "Enqueueing",
    "HookErrors",
    "Hooks",
    "JobOutcome",
    "OnOutcome",
    "Settled",
    "run_around",
]

Settled = Literal["completed", "retried", "dead", "cancelled"]
HOOKS = ("before_enqueue", "around_run", "on_complete", "on_retry", "on_dead", "on_cancel")
_ON = {"completed": "on_complete", "retried": "on_retry", "dead": "on_dead"}
_ON["cancelled"] = "on_cancel"


@attrs.frozen(kw_only=True)
class JobOutcome:
    """How a job's attempt was settled, as the outcome hooks see it (rule 4).

    ``outcome``: ``completed``, ``retried``, ``dead`` or ``cancelled``. ``error``: the
    job's ``last_error`` (retried, dead). ``exception``: what the run raised in this
    process, when it raised (None for a failure decided elsewhere: a timeout, a payload
    that could not be decoded). ``retry_in``: seconds until the retry. ``reason``: the
    cancel's reason.
    """

    outcome: Settled
    error: str | None = None
    exception: BaseException | None = None
    retry_in: float | None = None
    reason: str | None = None


#: the rest of the run (the next ``around_run``, then the handler); answers its result
CallNext = Callable[[], Awaitable[Any]]
#: ``around_run(job, call_next)``: answers the job's result (plain: an awaitable of it)
AroundRun = Callable[[Job, CallNext], Awaitable[Any]]
#: ``on_complete`` / ``on_retry`` / ``on_dead`` / ``on_cancel``: plain or async
OnOutcome = Callable[[Job, JobOutcome], Awaitable[None] | None]

F = TypeVar("F", bound=Callable[..., Any])


class Hooks:
    """A queue's hooks (``queue.hooks``); each method registers one and answers it, so it
    serves as a decorator. :meth:`add` registers every hook method of an object.

    Args:
        timeout: seconds an async outcome hook may run (rule 3; default 10).

    Raises:
        InvalidArgument: a timeout that is not a positive number of seconds.
    """

    def __init__(self, *, timeout: float = 10.0) -> None:
        self.timeout = seconds("hooks timeout", timeout, allow_zero=False)
        self.errors = HookErrors()
        self.before: list[BeforeEnqueue] = []
        self.around: list[AroundRun] = []
        self.settled: dict[str, list[OnOutcome]] = {name: [] for name in _ON}
        #: whether any worker-side hook is registered (the run then makes its ``Job``);
        #: kept by the registering methods, read once per job
        self.runs = False

    def __repr__(self) -> str:
        counts = {name: len(self.hooks(name)) for name in HOOKS}
        return f"Hooks({', '.join(f'{k}={v}' for k, v in counts.items() if v)})"

    def hooks(self, name: str) -> Sequence[Callable[..., Any]]:
        """The hooks of one kind (a name of :data:`HOOKS`), in order."""
        if name == "before_enqueue":
            return self.before
        if name == "around_run":
            return self.around
        for outcome, hook in _ON.items():
            if hook == name:
                return self.settled[outcome]
        raise InvalidArgument(f"no hook named {name!r}; the hooks are {', '.join(HOOKS)}")

    def _add(self, name: str, fn: F) -> F:
        if not callable(fn):
            raise InvalidArgument(f"a {name} hook must be callable, not {fn!r:.80}")
        hooks = self.hooks(name)
        assert isinstance(hooks, list)
        hooks.append(fn)
        self.runs = bool(self.around) or any(self.settled.values())
        return fn

    def before_enqueue(self, fn: Callable[[Enqueueing], Any]) -> Callable[[Enqueueing], Any]:
        """Register ``fn(enqueueing)``: called before each job is sent; it may add
        ``enqueueing.headers`` (str names and values)."""
        return self._add("before_enqueue", fn)

    def around_run(self, fn: AroundRun) -> AroundRun:
        """Register ``fn(job, call_next)``: it runs the job with ``await call_next()``
        (once) and answers its result; it may open a context manager around it."""
        return self._add("around_run", fn)

    def on_complete(self, fn: OnOutcome) -> OnOutcome:
        """Register ``fn(job, outcome)``: called once a completion is settled."""
        return self._add("on_complete", fn)

    def on_retry(self, fn: OnOutcome) -> OnOutcome:
        """Register ``fn(job, outcome)``: called once a failure is settled for a retry."""
        return self._add("on_retry", fn)

    def on_dead(self, fn: OnOutcome) -> OnOutcome:
        """Register ``fn(job, outcome)``: called once a job is settled dead."""
        return self._add("on_dead", fn)

    def on_cancel(self, fn: OnOutcome) -> OnOutcome:
        """Register ``fn(job, outcome)``: called once a job is settled cancelled."""
        return self._add("on_cancel", fn)

    def add(self, hooks: object) -> object:
        """Register each method of ``hooks`` named as a hook (``on_dead``, ...).

        Raises:
            InvalidArgument: it has none.
        """
        found = [name for name in HOOKS if callable(getattr(hooks, name, None))]
        if not found:
            raise InvalidArgument(f"{hooks!r:.80} has no hook method ({', '.join(HOOKS)})")
        for name in found:
            self._add(name, getattr(hooks, name))
        return hooks

    # -- running them (the worker) -------------------------------------------------------

    def fire(
        self,
        outcome: JobOutcome,
        job: Job,
        spawn: Callable[[Callable[[], Awaitable[None]]], None],
    ) -> None:
        """Call the outcome's hooks (rules 2 and 3): plain ones now, async ones through
        ``spawn`` (a task of their own, bounded by :attr:`timeout`)."""
        name = _ON[outcome.outcome]
        for hook in self.settled[outcome.outcome]:
            try:
                answer = hook(job, outcome)
            except BaseException as exc:  # rule 2 (no checkpoint here: not trio's)
                self.errors.failed(name, hook, exc, job.id)
                continue
            if inspect.isawaitable(answer):
                spawn(_Bounded(self, name, hook, answer, job.id).run)


@attrs.define(eq=False)
class _Bounded:
    """An async outcome hook's run, at most ``Hooks.timeout`` seconds (rule 3)."""

    hooks: Hooks
    name: str
    hook: object
    answer: Awaitable[Any]
    job: str

    async def run(self) -> None:
        with trio.move_on_after(self.hooks.timeout) as scope:
            try:
                await self.answer
            except trio.Cancelled:
                raise
            except BaseException as exc:  # rule 2
                self.hooks.errors.failed(self.name, self.hook, exc, self.job)
                return
        if scope.cancelled_caught:
            self.hooks.errors.failed(self.name, self.hook, None, self.job)


async def run_around(hooks: Sequence[AroundRun], job: Job, call: CallNext) -> Any:
    """The run through its ``around_run`` hooks, the first outermost (rule 2: what they
    raise is the job's; a plain hook must answer an awaitable, else that is its failure)."""
    return await _Step(hooks, 0, job, call)()


@attrs.define(eq=False)
class _Step:
    hooks: Sequence[AroundRun]
    at: int
    job: Job
    call: CallNext

    async def __call__(self) -> Any:
        if self.at == len(self.hooks):
            return await self.call()
        hook = self.hooks[self.at]
        answer = hook(self.job, _Step(self.hooks, self.at + 1, self.job, self.call))
        if not inspect.isawaitable(answer):
            name = getattr(hook, "__qualname__", repr(hook))
            raise TypeError(
                f"around_run hook {name} answered {answer!r:.80}, not an awaitable: "
                "an async hook awaits call_next(); a plain one answers call_next()"
            )
        return await answer
