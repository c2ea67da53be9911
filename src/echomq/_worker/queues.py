"""The queue-turn policy of a worker serving several queues: whom the claim loop asks
next, and for how many jobs. Plain values; no trio, no redis (``claims.py`` asks).

Rule 1 (strict order, the default): the queues in the order given. The first queue open
to claims is asked for every free slot (up to its cap); only a queue that answers fewer
than asked (it has no more, for now) lets the next be asked for the slots left, in the
same pass. A job on a queue above is always claimed before one below, as soon as that
queue is open again (Celery's ``-Q`` order, RQ's ordered queues).
Rule 2 (weights): the free slots are dealt one at a time by smooth weighted round robin
(nginx's) over the queues open to claims: each deal adds every open queue's weight to its
credit, gives the slot to the highest credit and takes the open weights' sum from it.
While every queue has work, queue ``i`` is dealt ``w_i / sum(w)`` of the slots, spread
evenly (weights 5,3,1: a,b,a,c,a,b,a,b,a...); a queue that is resting or at its cap is
skipped, and its share goes to the others (Sidekiq's weighted queues, made exact). The
credits carry over from one pass to the next, so one free slot at a time still comes out
in proportion.
Rule 3 (caps): a queue holding its cap of jobs (running, settling or prefetched) is
dealt no slot until one of them is done.
Rule 4 (rest): a queue that answered fewer jobs than asked is closed to claims (resting)
until its wake list says there is work, its idle time passes or the worker nudges it
(``claims.py`` rule 6): an empty queue costs one blocking ``BLPOP`` on the server, not a
claim per pass. A paused queue answers none, so it rests too.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from ..errors import InvalidArgument

__all__ = ["QueueTurns", "check_turns"]


def check_turns(
    count: int, weights: Sequence[int] | None, caps: Sequence[int | None] | None
) -> None:
    """Refuse weights or caps that do not fit ``count`` queues (before any I/O).

    Raises:
        InvalidArgument: a length other than ``count``, or a value that is not a positive
            int (a cap may also be None: no cap).
    """
    if weights is not None:
        if len(weights) != count:
            raise InvalidArgument(
                f"weights: {len(weights)} given for {count} queue(s); one per queue"
            )
        for weight in weights:
            if type(weight) is not int or weight < 1:
                raise InvalidArgument(f"weights must be positive ints, not {weight!r}")
    if caps is not None:
        if len(caps) != count:
            raise InvalidArgument(f"caps: {len(caps)} given for {count} queue(s); one per queue")
        for cap in caps:
            if cap is not None and (type(cap) is not int or cap < 1):
                raise InvalidArgument(f"caps must be positive ints or None, not {cap!r}")


@attrs.define(eq=False)
class QueueTurns:
    """Whom to ask for how many jobs (the module's rules), for ``count`` queues."""

    count: int
    weights: tuple[int, ...] | None = None  # None: strict order (rule 1)
    caps: tuple[int | None, ...] | None = None  # None: no cap on any queue
    _credit: list[int] = attrs.field(init=False)  # rule 2, carried between passes

    def __attrs_post_init__(self) -> None:
        check_turns(self.count, self.weights, self.caps)
        self._credit = [0] * self.count

    def _room(self, i: int, free: int, held: int) -> int:
        cap = None if self.caps is None else self.caps[i]
        return free if cap is None else max(0, min(free, cap - held))

    def share(self, free: int, open_: Sequence[bool], held: Sequence[int]) -> list[tuple[int, int]]:
        """``(queue index, jobs to ask for)`` for ``free`` slots, in the order to ask:
        ``open_[i]``: queue ``i`` is not resting (rule 4); ``held[i]``: the jobs of queue
        ``i`` held now (rule 3). Empty: nobody to ask (every queue resting or capped)."""
        room = [self._room(i, free, held[i]) if open_[i] else 0 for i in range(self.count)]
        weights = self.weights
        if weights is None:  # rule 1
            plan: list[tuple[int, int]] = []
            left = free
            for i, fits in enumerate(room):
                if left <= 0:
                    break
                take = min(left, fits)
                if take > 0:
                    plan.append((i, take))
                    left -= take
            return plan
        dealt = [0] * self.count  # rule 2
        credit = self._credit
        for _ in range(free):
            open_now = [i for i in range(self.count) if dealt[i] < room[i]]
            if not open_now:
                break
            best = open_now[0]
            for i in open_now:
                credit[i] += weights[i]
                if credit[i] > credit[best]:
                    best = i
            credit[best] -= sum(weights[i] for i in open_now)
            dealt[best] += 1
        return [(i, n) for i, n in enumerate(dealt) if n]
