"""Supervision of the worker's helper loops: a crash is logged and the loop restarted.

Rule 1: a helper (the claim loop, the lease keeper, the recovery sweeper, the listeners)
starts through ``nursery.start``; a failure before it first reported ``started`` propagates
(a bad start should be loud).
Rule 2: after that, an ``Exception`` out of the loop is logged with its traceback and the
loop is restarted after a jittered, growing delay (``_jitter.Backoff``, 0.1 s to 5 s); a
loop that ran well for ``HEALTHY`` seconds before it crashed restarts at the short delay
again. ``trio.Cancelled`` and ``BaseException`` pass: they are not crashes.
Rule 3: a refusal no retry soon can fix (:data:`REFUSALS`: an ACL permission missing, a
credential, a TLS setting) is not a crash and gets no traceback: one ERROR line naming the
helper and the refusal (which says the command and the permission), logged again only when
the refusal changes. The loops that the worker cannot work without (:data:`ESSENTIAL`:
the claim loop, the lease keeper) stop the worker with it (``serve`` raises it; ``echomq
worker`` exits 1 with that line); the others restart after ``REFUSED_RETRY`` seconds (an
ACL fixed meanwhile takes effect then), and the worker serves on without them.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio

from .._jitter import Backoff
from ..errors import AuthenticationError, PermissionDenied, TLSError

__all__ = ["ESSENTIAL", "HEALTHY", "REFUSALS", "REFUSED_RETRY", "Loop", "Supervisor", "is_crash"]

log = logging.getLogger("echomq.worker")

RESTART_MIN = 0.1
RESTART_MAX = 5.0
HEALTHY = 30.0  # a helper that ran this long before crashing restarts fast
REFUSED_RETRY = 60.0  # seconds before a helper refused by the server tries again (rule 3)
#: rule 3: refusals that are configuration, not weather
REFUSALS: tuple[type[Exception], ...] = (PermissionDenied, AuthenticationError, TLSError)
#: rule 3: the helpers whose refusal stops the worker (it could not run a job without them)
ESSENTIAL = frozenset({"claim loop", "lease keeper"})

Loop = Callable[..., Awaitable[None]]


class Supervisor:
    """Runs helper loops with restarts; counts the restarts (``Worker.statistics``)."""

    def __init__(self) -> None:
        self.restarts = 0
        self.refusals = 0  # rule 3: a helper refused by the server (not counted as restarts)

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
        said: str | None = None  # the refusal last logged (rule 3)
        while True:
            began = trio.current_time()
            try:
                async with trio.open_nursery() as nursery:
                    await nursery.start(loop)
                    if not started:
                        started = True
                        task_status.started()
                return
            except Exception as exc:
                if not started:
                    raise
                refusal = refused(exc)
                if refusal is not None:
                    if name in ESSENTIAL:
                        log.error("worker helper %r refused: %s; stopping", name, refusal)
                        raise refusal from None
                    self.refusals += 1
                    if str(refusal) != said:
                        said = str(refusal)
                        log.error(
                            "worker helper %r refused: %s; trying again every %.0f s",
                            name,
                            refusal,
                            REFUSED_RETRY,
                        )
                    await trio.sleep(REFUSED_RETRY)
                    continue
                self.restarts += 1
                if trio.current_time() - began > HEALTHY:
                    backoff.reset()  # it ran well for a while: start the backoff over
                delay = backoff.next()
                log.exception("worker helper %r crashed; restarting in %.1f s", name, delay)
                await trio.sleep(delay)


def refused(exc: BaseException) -> Exception | None:
    """The :data:`REFUSALS` error ``exc`` is (or a group of one, nested, holds), or None."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc if isinstance(exc, REFUSALS) else None


def is_crash(exc: BaseException) -> bool:
    """An error (not a cancellation, KeyboardInterrupt or SystemExit) is leaving serve."""
    if isinstance(exc, BaseExceptionGroup):
        return any(is_crash(e) for e in exc.exceptions)
    return isinstance(exc, Exception)
