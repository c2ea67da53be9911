"""The worker's free slots, and how fast they turn over: what the claim loop waits on.

Rule 1: at most ``concurrency`` jobs run (or settle) at once. The claim loop takes a slot
for each job it starts (:meth:`Room.take`); settling frees it (:meth:`Room.free`), and
every task waiting in :meth:`Room.changed` wakes (the claim loop, the prefetch starter).
Rule 2 (turnover): each time a cohort of slots (half the concurrency, rounded up) has
freed, the room notes whether that took at most ``PREFETCH_TURNOVER``; while it did, and
recently, the slots turn over fast (:attr:`Room.fast`): the claim loop may prefetch
(``claims.py`` rule 5).
"""

from __future__ import annotations

import attrs
import trio

from .._scripts import validate as v

__all__ = ["PREFETCH_TURNOVER", "Room"]

# rule 2: prefetch only while a cohort of slots frees within this many seconds (so a
# prefetched job waits about that long at most for its slot)
PREFETCH_TURNOVER = 0.05


@attrs.define(eq=False)
class Room:
    concurrency: int
    available: int = attrs.field(init=False)  # free slots
    cohort: int = attrs.field(init=False)  # rule 2 (and the most one claim asks for)
    _turned: int = attrs.field(default=0, init=False)  # slots freed since _turn_start
    _turn_start: float = attrs.field(factory=trio.current_time, init=False)
    _fast_until: float = attrs.field(default=0.0, init=False)
    _changed: trio.Event = attrs.field(factory=trio.Event, init=False)

    def __attrs_post_init__(self) -> None:
        self.available = self.concurrency
        self.cohort = min(v.MAX_COUNT, max(1, (self.concurrency + 1) // 2))

    @property
    def fast(self) -> bool:
        """Rule 2: the last cohort of slots freed within ``PREFETCH_TURNOVER``, recently."""
        return trio.current_time() < self._fast_until

    def take(self, n: int) -> None:
        """``n`` jobs start, each in a free slot."""
        self.available -= n

    def free(self, n: int) -> None:
        """``n`` jobs are done (settled or handed back): their slots are free."""
        self._turned += n
        if self._turned >= self.cohort:  # rule 2
            now = trio.current_time()
            fast = now - self._turn_start <= PREFETCH_TURNOVER
            self._fast_until = now + PREFETCH_TURNOVER if fast else 0.0
            self._turn_start = now
            self._turned = 0
        self.available += n
        self.wake()

    def wake(self) -> None:
        """Wake every task waiting in :meth:`changed` (a free slot, or a stop)."""
        changed, self._changed = self._changed, trio.Event()
        changed.set()

    async def changed(self) -> None:
        """Return at the next :meth:`free` (or :meth:`wake`)."""
        await self._changed.wait()
