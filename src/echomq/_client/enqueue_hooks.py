"""The producer's side of the hooks: ``before_enqueue``, and the count of hooks that failed.

Rule 1 (what a hook gets): an :class:`Enqueueing`, the job about to be sent (its task, its
options as a :class:`~echomq.jobs.NewJob`) and its ``headers``, a dict of strings the hook
may add to (``_model/headers.py``: they reach the worker's ``Job.headers``).
Rule 2 (a failing hook changes nothing): a hook that raises, or leaves a header that is not
a str, is logged and counted (:class:`HookErrors`, by hook name); the headers are as they
were before that hook, and the enqueue goes on.
Rule 3 (in the caller's call): a plain hook is called, an async one awaited, in the task
that enqueues, before the send; a slow one slows that enqueue only. The blocking client
drives the enqueue without an event loop: there only plain hooks can run (an async one
fails, by rule 2).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence

import attrs

from .._model.headers import check_headers
from .._model.job import NewJob
from .._model.text import error_text

__all__ = ["BeforeEnqueue", "Enqueueing", "HookErrors", "run_before"]

log = logging.getLogger("echomq.hooks")


@attrs.define(eq=False)
class Enqueueing:
    """A job about to be enqueued, as a ``before_enqueue`` hook sees it (rule 1)."""

    queue: str
    task: str | None
    new_job: NewJob
    headers: dict[str, str] = attrs.field(factory=dict)


#: ``before_enqueue(enqueueing)``: plain or async; what it answers is not used
BeforeEnqueue = Callable[[Enqueueing], Awaitable[None] | None]


@attrs.define(eq=False)
class HookErrors:
    """Hooks that raised (or timed out), by hook name: logged here, counted for
    ``echomq_hook_errors_total``."""

    counts: dict[str, int] = attrs.field(factory=dict)

    def failed(self, hook: str, fn: object, exc: BaseException | None, job: str | None) -> None:
        self.counts[hook] = self.counts.get(hook, 0) + 1
        name = getattr(fn, "__qualname__", None) or repr(fn)
        what = "timed out" if exc is None else f"raised {error_text(exc, 1024)}"
        log.error(
            "hook %s (%s) %s%s; the job's outcome is unchanged",
            hook,
            name,
            what,
            f" for job {job}" if job else "",
            exc_info=exc if exc is not None and not isinstance(exc, TimeoutError) else None,
        )


async def run_before(
    hooks: Sequence[BeforeEnqueue], enqueueing: Enqueueing, errors: HookErrors
) -> dict[str, str]:
    """Run every ``before_enqueue`` hook in order (rules 2 and 3); answer the headers."""
    for hook in hooks:
        kept = dict(enqueueing.headers)
        try:
            answer = hook(enqueueing)
            if inspect.isawaitable(answer):
                await answer
            check_headers(enqueueing.headers)
        except Exception as exc:
            enqueueing.headers = kept
            errors.failed("before_enqueue", hook, exc, enqueueing.new_job.job_id)
    return enqueueing.headers
