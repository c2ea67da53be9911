"""The loops that follow the workers' channel (``emq:{q}:control``), one per event kind
(and per queue, for a worker serving several: ``queue`` names the feed's).

Rule 1 (cancel requests): a ``cancel`` event goes to the held-job table
(``InFlight.request_cancel``) with its reason, its grace (which arms the fence time) and
whether the attempt is fenced already (stopped hard at once). A request for a job this
worker does not hold (yet) is remembered for its claim.
Rule 2 (jobs scheduled): a ``scheduled`` event, or a ``retrying`` one with a delay, may be
due before an idle claim loop's wait ends (the scripts push wake tokens for ready work
only): the claim loop nudges its own wake list then (``ClaimLoop.scheduled``).
Rule 3 (the outbox): an ``outbox`` event says a flow child whose parent is on another
queue finished here: the sweeper relays it now (``Sweeper.relay_soon``).
Each runs supervised (``supervise.py``): a crash is logged and the loop restarted.
"""

from __future__ import annotations

import logging

import trio

from ..errors import TRANSIENT
from ..events import EventFeed
from .cancellation import InFlight
from .claims import ClaimLoop
from .sweeper import Sweeper

__all__ = ["follow_cancels", "follow_outbox", "follow_schedule"]

log = logging.getLogger("echomq.worker")


async def follow_cancels(
    feed: EventFeed,
    inflight: InFlight,
    queue: str | None = None,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Rule 1."""
    with feed.listen(events=("cancel",), buffer=4096) as events:
        task_status.started()
        async for event in events:
            if event.job is None:
                continue
            reason = event.fields.get("reason")
            grace = event.fields.get("grace_ms")
            fenced = event.fields.get("fenced") is True
            found = inflight.request_cancel(
                event.job,
                reason if isinstance(reason, str) else None,
                grace=grace / 1000 if isinstance(grace, int | float) else None,
                fenced=fenced,
                queue=queue,
            )
            if found and fenced:
                log.warning(
                    "job %s: fenced (its cancel grace ran out): stopping it hard", event.job
                )
            elif found:
                log.info("job %s: cancel requested (%s)", event.job, reason)


async def follow_schedule(
    feed: EventFeed,
    claims: ClaimLoop,
    queue: str | None = None,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Rule 2."""
    with feed.listen(events=("scheduled", "retrying"), buffer=1024) as events:
        task_status.started()
        async for event in events:
            delay_ms = event.fields.get("delay_ms")
            due_in = delay_ms / 1000 if isinstance(delay_ms, int | float) else None
            if event.event == "retrying" and not due_in:
                continue  # retried at once: the script pushed a wake token
            try:
                await claims.scheduled(due_in, queue)
            except TRANSIENT:
                pass  # the idle cap still bounds the wait


async def follow_outbox(
    feed: EventFeed,
    sweeper: Sweeper,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Rule 3."""
    with feed.listen(events=("outbox",), buffer=64) as events:
        task_status.started()
        async for _ in events:
            sweeper.relay_soon()
