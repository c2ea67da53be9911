"""One pub/sub subscription to a queue's events, fanned out to memory channels.

Rule 1: a feed holds exactly one subscription (``emq:{q}:events``), however many tasks
listen: ``TaskHandle.result()`` and the worker's cancel listener never open their own.
Rule 2: events are fire-and-forget (at most once). A listener whose buffer is full loses
the event rather than stalling the feed; ``EventFeed.dropped`` counts those.
Rule 3: a listener only sees what it asked for (one job, some event names, or all), and
a message nobody asked for is not decoded past its event name.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Collection, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import attrs
import trio

from ._scripts.keyspace import Keyspace
from ._trio import open_service_nursery
from ._wire.dial import open_pubsub
from ._wire.pubsub import PubSub
from .config import ConnectionConfig

__all__ = [
    "Event",
    "event_channel",
    "EventFeed",
    "open_control_feed",
    "open_event_feed",
]

_HEAD = b'{"event":"'


@attrs.frozen(kw_only=True)
class Event:
    """One lifecycle event: its name, its job id (when it has one) and every field."""

    event: str
    job: str | None
    fields: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.define(eq=False)
class _Listener:
    send: trio.MemorySendChannel[Event]
    job: str | None
    events: frozenset[str] | None


def _event_name(data: bytes) -> str | None:
    """The event name without a full decode, when the JSON starts with it."""
    if data.startswith(_HEAD):
        end = data.find(b'"', len(_HEAD))
        if end > 0:
            return data[len(_HEAD) : end].decode("utf-8", "replace")
    return None


class EventFeed:
    """Open with :func:`open_event_feed`; hand out listeners with :meth:`listen`."""

    def __init__(self, queue: str, pubsub: PubSub) -> None:
        self.queue = queue
        self._pubsub = pubsub
        self._by_job: dict[str, set[_Listener]] = {}
        self._by_name: dict[str, set[_Listener]] = {}
        self._all: set[_Listener] = set()
        self.dropped = 0
        self.received = 0

    @property
    def reconnects(self) -> int:
        """How many times the subscription was made again (events may have been lost)."""
        return self._pubsub.reconnects

    @contextmanager
    def listen(
        self,
        *,
        job: str | None = None,
        events: Collection[str] | None = None,
        buffer: int = 256,
    ) -> Iterator[trio.MemoryReceiveChannel[Event]]:
        """A channel of the events for ``job`` (or every job), filtered by ``events`` names.

        The listener is registered before the block starts, so nothing published after
        that point is missed (unless its buffer is full).
        """
        send, receive = trio.open_memory_channel[Event](buffer)
        names = frozenset(events) if events is not None else None
        listener = _Listener(send, job, names)
        if job is not None:
            self._by_job.setdefault(job, set()).add(listener)
        elif names is not None:
            for name in names:
                self._by_name.setdefault(name, set()).add(listener)
        else:
            self._all.add(listener)
        try:
            with receive:
                yield receive
        finally:
            send.close()
            if job is not None:
                group = self._by_job.get(job)
                if group is not None:
                    group.discard(listener)
                    if not group:
                        del self._by_job[job]
            elif names is not None:
                for name in names:
                    self._by_name.get(name, set()).discard(listener)
            else:
                self._all.discard(listener)

    def _targets(self, name: str | None) -> bool:
        return bool(self._all or self._by_job or (name is None or name in self._by_name))

    def dispatch(self, data: bytes) -> None:
        """Decode one published message and hand it to every listener that asked for it."""
        self.received += 1
        name = _event_name(data)
        if name is not None and not self._targets(name):
            return  # nobody listens: skip the decode (a busy queue publishes a lot)
        try:
            fields = json.loads(data)
        except (ValueError, RecursionError):  # not JSON, or nested too deeply: skipped
            return
        if not isinstance(fields, dict):
            return
        name = str(fields.get("event", ""))
        job = fields.get("job")
        event = Event(event=name, job=job if isinstance(job, str) else None, fields=fields)
        targets: list[_Listener] = list(self._all)
        targets += self._by_name.get(name, ())
        if event.job is not None:
            targets += self._by_job.get(event.job, ())
        for listener in targets:
            if listener.events is not None and name not in listener.events:
                continue
            try:
                listener.send.send_nowait(event)
            except trio.WouldBlock:
                self.dropped += 1
            except trio.BrokenResourceError:
                pass  # the listener left

    async def _pump(self) -> None:
        async for message in self._pubsub:
            self.dispatch(message.data)


def event_channel(queue: str) -> str:
    """The pub/sub channel of ``queue``'s events (``emq:{q}:events``).

    Raises:
        InvalidKey: a bad queue name.
    """
    return Keyspace(queue).events


@asynccontextmanager
async def open_event_feed(url: str | ConnectionConfig, queue: str) -> AsyncIterator[EventFeed]:
    """Subscribe to ``queue``'s events; the subscription is confirmed when this returns.

    Raises:
        InvalidKey: a bad queue name (before any I/O).
        ConnectionLost: the server cannot be reached.
    """
    async with _open_feed(url, queue, event_channel(queue)) as feed:
        yield feed


@asynccontextmanager
async def open_control_feed(url: str | ConnectionConfig, queue: str) -> AsyncIterator[EventFeed]:
    """Subscribe to ``queue``'s workers' channel (``emq:{q}:control``): cancel requests
    (``cancel``), and jobs scheduled (``scheduled`` / ``retrying`` with ``delay_ms``), in
    the events' shape. A worker listens here, not to every job's lifecycle events.

    Raises:
        InvalidKey: a bad queue name (before any I/O).
        ConnectionLost: the server cannot be reached.
    """
    async with _open_feed(url, queue, Keyspace(queue).control) as feed:
        yield feed


@asynccontextmanager
async def _open_feed(
    url: str | ConnectionConfig, queue: str, channel: str
) -> AsyncIterator[EventFeed]:
    async with open_pubsub(url) as pubsub:
        await pubsub.subscribe(channel)  # returns once the server confirmed it
        feed = EventFeed(queue, pubsub)
        async with open_service_nursery() as nursery:
            nursery.start_soon(feed._pump)
            yield feed
