"""One backoff for every reconnect and restart loop: exponential, with full jitter.

Rule 1: each :meth:`Backoff.next` answers a delay drawn uniformly between ``low`` and a
ceiling that starts at ``low`` and doubles with each call, up to ``high``: the first
retry comes after ``low`` seconds, later ones spread out, so that after a Redis restart a
fleet of workers (and their connections) does not retry in lockstep.
Rule 2: :meth:`Backoff.reset` after a success starts the ceiling over.
Rule 3: no loop writes its own ``delay = min(delay * 2, cap)``: the wire's reconnects,
pub/sub resubscriptions, the claim loop, settling, the wait for Redis at start and the
worker's helper restarts all use this class (grep ``Backoff(`` for the list).
"""

from __future__ import annotations

import random

import attrs
import trio

__all__ = ["Backoff"]


@attrs.define(eq=False)
class Backoff:
    """Delays (seconds) for one retry loop; not shared between loops."""

    low: float
    high: float
    _ceiling: float = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        if not 0 < self.low <= self.high:
            raise ValueError(f"backoff needs 0 < low <= high, not {self.low!r}, {self.high!r}")
        self._ceiling = self.low

    @property
    def ceiling(self) -> float:
        """The largest delay the next call may answer."""
        return self._ceiling

    def next(self) -> float:
        """The next delay; the ceiling doubles (up to ``high``) for the call after."""
        delay = random.uniform(self.low, self._ceiling)
        self._ceiling = min(self._ceiling * 2, self.high)
        return delay

    def reset(self) -> None:
        """After a success: the next delay is ``low`` again."""
        self._ceiling = self.low

    async def sleep(self) -> None:
        """Sleep for :meth:`next` seconds."""
        await trio.sleep(self.next())
