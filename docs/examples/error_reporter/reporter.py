"""An error reporter in the style of Sentry, written against echomq's hooks.

    reporter = ErrorReporter(transport)      # anything with send(event)
    queue.hooks.add(reporter)

What it does, hook by hook:

- ``before_enqueue``: the tags of the code that enqueues (``reporter.tag("user", ...)``
  in a web request, say) travel with the job, as a header;
- ``around_run``: while the job runs, its tags are the job's (queue, task, attempt, id)
  and those it was enqueued with, so an error the task reports itself
  (``reporter.capture_message``) carries them too;
- ``on_dead``: one event per job that is out of tries, with the exception's type, its
  message, its stack frames, the job's tags, and a fingerprint (task + exception type)
  that groups the same failure of many jobs into one issue;
- ``on_retry``: a breadcrumb only (a retried failure is not yet an error), unless
  ``report_retries`` is set.

The transport is the only I/O: a real one posts the event to the reporting service (in a
thread, or with an async client: ``send`` may be async). An event that cannot be sent is
the hook's failure: echomq logs and counts it, and the job's outcome stays as settled.
"""

from __future__ import annotations

import contextvars
import inspect
import json
import time
import traceback
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from echomq import Enqueueing, Job, JobOutcome

__all__ = ["ErrorReporter", "Transport"]

HEADER = "reporter.tags"  # the job header that carries the enqueuer's tags


class Transport(Protocol):
    """Where events go (a Sentry DSN's HTTP endpoint, a log, a list in a test)."""

    def send(self, event: dict[str, Any]) -> Awaitable[None] | None: ...


_NO_TAGS: Mapping[str, str] = {}
_tags: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "reporter_tags", default=_NO_TAGS
)


class ErrorReporter:
    """Reports dead jobs (and, optionally, retries) to ``transport``."""

    def __init__(
        self,
        transport: Transport,
        *,
        release: str | None = None,
        report_retries: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.transport = transport
        self.release = release
        self.report_retries = report_retries
        self.clock = clock
        # the latest breadcrumbs (bounded: a worker runs for months)
        self.breadcrumbs: deque[dict[str, Any]] = deque(maxlen=100)

    # -- the application's side ------------------------------------------------------------

    def tag(self, name: str, value: str) -> None:
        """Tag what this code does from now on (and the jobs it enqueues)."""
        _tags.set({**_tags.get(), name: value})

    async def capture_message(self, message: str, level: str = "info") -> None:
        """Report a message, with the current tags (inside a job: the job's)."""
        await self._send({"message": message, "level": level, "tags": dict(_tags.get())})

    # -- the hooks -------------------------------------------------------------------------

    def before_enqueue(self, enqueueing: Enqueueing) -> None:
        tags = _tags.get()
        if tags:
            enqueueing.headers[HEADER] = json.dumps(dict(tags), sort_keys=True)

    async def around_run(self, job: Job, call_next: Callable[[], Awaitable[Any]]) -> Any:
        token = _tags.set(self._job_tags(job))
        try:
            return await call_next()
        finally:
            _tags.reset(token)

    async def on_retry(self, job: Job, outcome: JobOutcome) -> None:
        self.breadcrumbs.append(
            {"category": "echomq", "message": f"{job.task} {job.id}: {outcome.error}"}
        )
        if self.report_retries:
            await self._report(job, outcome, level="warning")

    async def on_dead(self, job: Job, outcome: JobOutcome) -> None:
        await self._report(job, outcome, level="error")

    # -- events ----------------------------------------------------------------------------

    def _job_tags(self, job: Job) -> dict[str, str]:
        tags: dict[str, str] = {}
        carried = job.headers.get(HEADER)
        if carried:
            tags.update(json.loads(carried))
        tags.update(
            {
                "echomq.queue": job.queue,
                "echomq.task": job.task,
                "echomq.job": job.id,
                "echomq.attempt": str(job.attempt),
            }
        )
        return tags

    async def _report(self, job: Job, outcome: JobOutcome, *, level: str) -> None:
        exc = outcome.exception
        if exc is not None:
            kind, value = type(exc).__qualname__, str(exc)
            frames = [
                {"filename": f.filename, "function": f.name, "lineno": f.lineno}
                for f in traceback.extract_tb(exc.__traceback__)
            ]
        else:  # decided without an exception here (a timeout, a bad payload)
            kind, _, value = (outcome.error or "").partition(": ")
            frames = []
        event = {
            "level": level,
            "exception": {"type": kind, "value": value, "frames": frames},
            "message": outcome.error,
            "tags": self._job_tags(job),
            "fingerprint": [job.task, kind],
            "extra": {"outcome": outcome.outcome, "retry_in": outcome.retry_in},
            "breadcrumbs": [b for b in self.breadcrumbs if job.id in b["message"]],
        }
        await self._send(event)

    async def _send(self, event: dict[str, Any]) -> None:
        event["timestamp"] = self.clock()
        if self.release is not None:
            event["release"] = self.release
        sent = self.transport.send(event)
        if inspect.isawaitable(sent):
            await sent
