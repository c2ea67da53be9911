"""The hub: polls the queues, listens to their event channels, fans out to browsers.

Rule 1: one poll per interval builds one snapshot, shared by every client; one pub/sub
connection listens for every followed queue. Browsers never cause Redis reads beyond
the ``logs`` request and their own commands.
Rule 2: a slow browser never slows the hub: broadcasts are ``send_nowait`` into a small
per-client buffer, and a message that does not fit is dropped for that client (the next
snapshot repairs its picture). Events are batched (at most ``EVENT_BATCH`` per flush).
Rule 3: a Redis outage is reported to the page (a ``status`` message) and retried; it
never ends the server.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import trio

from .._wire.connection import Connection
from .._wire.dial import open_pubsub
from .._wire.pubsub import PubSub
from ..config import ConnectionConfig
from ..errors import EchoMQError
from ..events import event_channel
from .messages import EventItem, QueueView, events_message, snapshot_message, status_message
from .state import FailureLog, Throughput, discover_queues, read_queue, server_now_ms

__all__ = ["Hub", "first_error"]

log = logging.getLogger("echomq.dashboard")

EVENT_BATCH = 100
EVENT_FLUSH = 0.2  # seconds between event batches
DISCOVER_EVERY = 5  # polls between two SCANs for new queues (when not given a list)
CLIENT_BUFFER = 32


def first_error(error: BaseException) -> BaseException:
    """The first leaf of a (nested) exception group, or the exception itself."""
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


class Hub:
    """Shared state of one dashboard server; start :meth:`run` with ``nursery.start``."""

    def __init__(
        self,
        conn: Connection,
        config: ConnectionConfig,
        *,
        queues: Sequence[str] | None,
        interval: float,
        history: int,
    ) -> None:
        self.conn = conn
        self.config = config
        self.fixed_queues = list(queues) if queues is not None else None
        self.queues: list[str] = list(queues or [])
        self.interval = interval
        self.history = history
        self.throughput = Throughput(history)
        self.failures = FailureLog()
        self.snapshot: dict[str, Any] | None = None
        self.status: dict[str, Any] = status_message(ok=True)
        self._clients: set[trio.MemorySendChannel[dict[str, Any]]] = set()
        self._channels: dict[str, str] = {}  # events channel -> queue
        self._pending: list[EventItem] = []
        self._dropped = 0
        self._poll_now = trio.Event()
        self._pubsub: PubSub | None = None
        self._now_ms = 0
        self._now_at = 0.0

    # -- clients -----------------------------------------------------------------------

    def attach(
        self,
    ) -> tuple[trio.MemorySendChannel[dict[str, Any]], trio.MemoryReceiveChannel[dict[str, Any]]]:
        """A new client's feed of broadcasts; give the send side back to :meth:`detach`."""
        send, receive = trio.open_memory_channel[dict[str, Any]](CLIENT_BUFFER)
        self._clients.add(send)
        return send, receive

    def detach(self, send: trio.MemorySendChannel[dict[str, Any]]) -> None:
        self._clients.discard(send)
        send.close()

    def broadcast(self, message: dict[str, Any]) -> None:
        for send in list(self._clients):
            try:
                send.send_nowait(message)
            except trio.WouldBlock:
                pass  # a slow client misses this one; the next snapshot repairs it
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._clients.discard(send)

    def poll_soon(self) -> None:
        """Ask for a poll now (after an operator command), not at the next tick."""
        self._poll_now.set()

    def server_ms(self) -> int:
        """An estimate of the server clock now, from the last poll."""
        return self._now_ms + int((trio.current_time() - self._now_at) * 1000)

    # -- loops -------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Poll, listen and flush until cancelled; ``started`` after the first poll."""
        async with open_pubsub(self.config) as pubsub:
            self._pubsub = pubsub
            await self._follow(self.queues)
            await self._poll(discover=self.fixed_queues is None)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._listen, pubsub)
                nursery.start_soon(self._flush_loop)
                nursery.start_soon(self._poll_loop)
                task_status.started()

    async def _follow(self, queues: Sequence[str]) -> None:
        assert self._pubsub is not None
        new = [q for q in queues if event_channel(q) not in self._channels]
        for q in new:
            self._channels[event_channel(q)] = q
        if new:
            await self._pubsub.subscribe(*(event_channel(q) for q in new))

    async def _poll_loop(self) -> None:
        polls = 0
        while True:
            with trio.move_on_after(self.interval):
                await self._poll_now.wait()
            self._poll_now = trio.Event()
            polls += 1
            discover = self.fixed_queues is None and polls % DISCOVER_EVERY == 0
            await self._poll(discover=discover)

    async def _poll(self, *, discover: bool) -> None:
        failure: BaseException | None = None
        views: list[QueueView | None] = []
        try:
            if discover:
                found = await discover_queues(self.conn)
                await self._follow(found)
                self.queues = sorted(set(self.queues) | set(found))
            now_ms = await server_now_ms(self.conn)
            self._now_ms, self._now_at = now_ms, trio.current_time()
            views = [None] * len(self.queues)

            async def one(i: int, name: str) -> None:
                views[i] = await read_queue(
                    self.conn, name, throughput=self.throughput, failures=self.failures
                )

            async with trio.open_nursery() as nursery:
                for i, name in enumerate(self.queues):
                    nursery.start_soon(one, i, name)
        except* EchoMQError as group:
            failure = first_error(group)
        if failure is not None:
            log.warning("dashboard poll failed: %s", failure)
            self._set_status(status_message(ok=False, error=str(failure)))
            return
        self._set_status(status_message(ok=True))
        self.snapshot = snapshot_message(
            now_ms=now_ms, interval=self.interval, queues=[v for v in views if v is not None]
        )
        self.broadcast(self.snapshot)

    def _set_status(self, status: dict[str, Any]) -> None:
        if status != self.status:
            self.status = status
            self.broadcast(status)

    async def _listen(self, pubsub: PubSub) -> None:
        async for message in pubsub:
            queue = self._channels.get(message.channel)
            if queue is None:
                continue
            try:
                event = json.loads(message.data)
            except (ValueError, RecursionError):  # not JSON, or nested too deeply: skipped
                continue
            if not isinstance(event, dict) or "event" not in event:
                continue
            self.failures.note(queue, event, self.server_ms())
            self._pending.append(EventItem(queue=queue, event=event))
            if len(self._pending) > EVENT_BATCH:
                self._dropped += len(self._pending) - EVENT_BATCH
                del self._pending[:-EVENT_BATCH]

    async def _flush_loop(self) -> None:
        while True:
            await trio.sleep(EVENT_FLUSH)
            if self._pending:
                items, dropped = self._pending, self._dropped
                self._pending, self._dropped = [], 0
                self.broadcast(events_message(items, dropped))
