"""Optional OpenTelemetry tracing: a span on enqueue, its context in the job's row, a child
span around the run, so a trace follows a request into its job (docs/observability.md).

Rule 1 (no cost without it): ``opentelemetry-api`` is imported once, here; when it is not
installed :data:`ENABLED` is False and every caller tests that one flag and does nothing
else (no span, no context, no ``trace`` field: the enqueue sends an empty string).
Rule 2: the API only. Which spans are recorded and where they go is the application's
choice (an SDK ``TracerProvider`` and its exporter); with the API alone (no provider set)
nothing is done at all (:func:`on`): no span, no context in the row.
Rule 3: the context travels as the propagator's carrier (``traceparent``, ``tracestate``,
baggage: whatever the global propagator writes): entries of the job's headers
(``_model/headers.py``), the row field ``before_enqueue`` hooks write to; the claim script
answers it with the job, so the worker needs no extra read.
Spans follow the messaging conventions: ``send <queue>`` (PRODUCER) around the enqueue,
``process <queue>`` (CONSUMER, its child) around decoding and running the job, with
``messaging.system = echomq``, the queue, the job id, the task and the attempt.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import attrs

try:
    from opentelemetry import propagate, trace
    from opentelemetry.trace import (
        NoOpTracerProvider,
        ProxyTracerProvider,
        SpanKind,
        Status,
        StatusCode,
    )
except ImportError:  # rule 1
    ENABLED = False
else:
    ENABLED = True

__all__ = ["ENABLED", "Sending", "on", "processing", "sending"]


# ``get_tracer_provider()`` reads os.environ on every call while no provider is set (once
# per job): while the API's module global says none was set, and none is named in the
# environment, the answer is known without it. A provider, once set, cannot change.
_FAST = (
    ENABLED
    and hasattr(trace, "_TRACER_PROVIDER")
    and "OTEL_PYTHON_TRACER_PROVIDER" not in os.environ
)
_on = False


def on() -> bool:
    """Whether to trace now: opentelemetry is installed (:data:`ENABLED`) and the
    application set a tracer provider (the API's default one records nothing, so with it
    no span is made and no context written: rule 2). Callers test ``ENABLED`` first."""
    global _on
    if _on:
        return True
    if _FAST and trace._TRACER_PROVIDER is None:
        return False
    _on = not isinstance(trace.get_tracer_provider(), ProxyTracerProvider | NoOpTracerProvider)
    return _on


_SYSTEM = "echomq"


def _tracer() -> Any:
    return trace.get_tracer("echomq")


@attrs.define(eq=False)
class Sending:
    """The enqueue's span: ``carrier`` is the context to store in the job's headers
    (empty: nothing to carry); call :meth:`sent` with the job id once enqueued."""

    span: Any
    carrier: dict[str, str]

    def sent(self, job_id: str, deduplicated: bool = False) -> None:
        self.span.set_attribute("messaging.message.id", job_id)
        if deduplicated:
            self.span.set_attribute("echomq.deduplicated", True)

    def sent_many(self, count: int) -> None:
        """A bulk enqueue's span: ``count`` jobs sent, each carrying its context."""
        self.span.set_attribute("messaging.batch.message_count", count)


@contextmanager
def sending(queue: str, task: str | None) -> Iterator[Sending]:
    """A PRODUCER span ``send <queue>`` for one enqueue, current for the block (ENABLED only)."""
    attributes = {
        "messaging.system": _SYSTEM,
        "messaging.operation.type": "send",
        "messaging.destination.name": queue,
    }
    if task:
        attributes["echomq.task"] = task
    with _tracer().start_as_current_span(
        f"send {queue}", kind=SpanKind.PRODUCER, attributes=attributes
    ) as span:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        yield Sending(span, carrier)


def _parent(headers: Mapping[str, str]) -> Any:
    """The context stored by :func:`sending` in the job's headers (None: none)."""
    if not headers:
        return None
    return propagate.extract(dict(headers))


@contextmanager
def processing(
    queue: str, job_id: str, attempt: int, headers: Mapping[str, str]
) -> Iterator[Processing]:
    """A CONSUMER span ``process <queue>``, child of the enqueue's span when the row
    carried one; current for the block, so the task's own spans nest under it."""
    attributes = {
        "messaging.system": _SYSTEM,
        "messaging.operation.type": "process",
        "messaging.destination.name": queue,
        "messaging.message.id": job_id,
        "echomq.attempt": attempt,
    }
    with _tracer().start_as_current_span(
        f"process {queue}",
        context=_parent(headers),
        kind=SpanKind.CONSUMER,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield Processing(span)


@attrs.define(eq=False)
class Processing:
    """The run's span; :meth:`outcome` records how the attempt ended."""

    span: Any

    def outcome(self, task: str, outcome: str, error: str | None = None) -> None:
        if task:
            self.span.set_attribute("echomq.task", task)
        self.span.set_attribute("echomq.outcome", outcome)
        if error is not None:
            self.span.set_status(Status(StatusCode.ERROR, error[:1024]))
