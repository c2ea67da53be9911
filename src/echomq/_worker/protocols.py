"""What the runtime needs of a queue and its tasks: two Protocols, so that the runtime
never imports the surface (``app.py``) that provides them.

``echomq.Queue`` and ``echomq.app.Task`` satisfy them; so can any object a test or an
embedding program builds. The worker opens the queue for the duration of ``serve`` (a
task may enqueue through the same queue object), reads its tasks by name, decodes
payloads with its codec, and listens to its event feed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from .._model.codec import Call, Codec
from .._model.options import TaskOptions
from .._wire.interface import RedisConnection
from ..events import EventFeed

__all__ = ["QUEUE_ATTRIBUTES", "QueueSpec", "TaskSpec"]


class TaskSpec(Protocol):
    """A registered task as the worker runs it."""

    @property
    def name(self) -> str: ...

    @property
    def fn(self) -> Callable[..., Any]: ...

    @property
    def options(self) -> TaskOptions: ...

    @property
    def wants_job(self) -> bool:
        """Whether the function takes the ``Job`` context as its first argument."""

    @property
    def is_async(self) -> bool: ...

    @property
    def loads_models(self) -> bool:
        """Whether :meth:`load_call` validates anything (a parameter annotated with a
        model); False: the decoded call is the call."""
        ...

    def load_call(self, call: Call) -> Call:
        """The decoded call as the function takes it (a typed task's models validated;
        raises ``SerializationError`` when an argument does not fit)."""


class QueueSpec(Protocol):
    """A named queue with its tasks, as the worker serves it."""

    url: str  # the worker's --url may replace it before serve

    @property
    def name(self) -> str: ...

    @property
    def codec(self) -> Codec: ...

    @property
    def tasks(self) -> Mapping[str, TaskSpec]: ...

    @property
    def connection(self) -> RedisConnection:
        """The open connection (``open()`` first)."""

    def open(self) -> AbstractAsyncContextManager[Any]:
        """Connect for the duration of the block."""

    async def event_feed(self) -> EventFeed:
        """The queue's one event subscription (opened on first use, inside ``open()``)."""


#: checked by ``Worker(queue)`` before any I/O (a Protocol is not ``isinstance``-able here)
QUEUE_ATTRIBUTES = ("name", "url", "codec", "tasks", "open", "event_feed")
