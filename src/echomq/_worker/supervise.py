"""Supervision of the worker's helper loops: a crash is logged and the loop restarted.

Rule 1: a helper (the claim loop, the lease keeper, the recovery sweeper, the listeners)
starts through ``nursery.start``; a failure before it first reported ``started`` propagates
(a bad start should be loud).
Rule 2: after that, an ``Exception`` out of the loop is logged with its traceback and the
loop is restarted after a jittered, growing delay (``_jitter.Backoff``, 0.1 s to 5 s); a
loop that ran well for ``HEALTHY`` seconds before it crashed restarts at the short delay
again. ``trio.Cancelled`` and ``BaseException`` pass: they are not crashes.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio

from .._jitter import Backoff

__all__ = ["HEALTHY", "Loop", "Supervisor", "is_crash"]

log = logging.getLogger("echomq.worker")

RESTART_MIN = 0.1
RESTART_MAX = 5.0
HEALTHY = 30.0  # a helper that ran this long before crashing restarts fast

Loop = Callable[..., Awaitable[None]]


class Supervisor:
    """Runs helper loops with restarts; counts the restarts (``Worker.statistics``)."""

    def __init__(self) -> None:
        self.restarts = 0

    async def supervise(
        self,
        name: str,
        loop: Loop,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run ``loop`` (started with ``nursery.start``); restart it when it crashes."""
        backoff = Backoff(RESTART_MIN, RESTART_MAX)
        started = False
        while True:
            began = trio.current_time()
            try:
                async with trio.open_nursery() as nursery:
                    await nursery.start(loop)
                    if not started:
                        started = True
                        task_status.started()
                return
            except Exception:
                if not started:
                    raise
                self.restarts += 1
                if trio.current_time() - began > HEALTHY:
                    backoff.reset()  # it ran well for a while: start the backoff over
                delay = backoff.next()
                log.exception("worker helper %r crashed; restarting in %.1f s", name, delay)
                await trio.sleep(delay)


def is_crash(exc: BaseException) -> bool:
    """An error (not a cancellation, KeyboardInterrupt or SystemExit) is leaving serve."""
    if isinstance(exc, BaseExceptionGroup):
        return any(is_crash(e) for e in exc.exceptions)
    return isinstance(exc, Exception)
