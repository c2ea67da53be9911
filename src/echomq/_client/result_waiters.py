"""The waiters of one result feed, without I/O: the bookkeeping of ``results.py``'s rules.

The trio :class:`~echomq.results.ResultFeed` and the asyncio
:class:`~echomq._client.aio_results.AsyncioResultFeed` each run their own reading loop (their
own connection, clock, events and cancellation) around one :class:`Waiters`: who waits
for which job, from which stream id on, when the reader may start and where, which entry
answers whom, and which rows to re-read (results.py rules 1, 2 and 4).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import attrs

from .._model.states import TERMINAL_STATES, JobState
from .._scripts.keyspace import keyspace
from .._wire.connection import Arg
from ..errors import ServerError
from ..jobs.lifecycle import read_job
from .result_reads import Outcome, entry_job_id, entry_outcome, row_outcome

__all__ = ["Event", "Waiter", "Waiters"]


class Event(Protocol):
    """A trio.Event or an asyncio.Event: what a waiter waits on."""

    def set(self) -> None: ...

    def is_set(self) -> bool: ...

    def wait(self) -> Awaitable[object]: ...


def _id_key(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


@attrs.define(eq=False)
class Waiter:
    """One call waiting for one job's outcome."""

    job_id: str
    since: float
    done: Event
    started: bool = False  # its probe answered: the reader may start after its id
    after: str = "0-0"
    outcome: Outcome | None = None
    error: BaseException | None = None

    def deliver(self, outcome: Outcome | None) -> bool:
        """Answer it (once); True when this answered it."""
        if self.done.is_set():
            return False
        self.outcome = outcome
        self.done.set()
        return True

    def fail(self, error: BaseException) -> None:
        """The reader stopped on a bug: the waiter raises it rather than hang."""
        if not self.done.is_set():
            self.error = error
            self.done.set()


class Waiters:
    """The waiters of one feed (one queue); ``clock`` and ``event`` are the loop's."""

    def __init__(self, queue: str, clock: Callable[[], float], event: Callable[[], Event]):
        self.queue = queue
        self._clock = clock
        self._event = event
        self.by_job: dict[str, list[Waiter]] = {}
        self._unstarted = 0
        self.changed = event()

    @property
    def count(self) -> int:
        """Waiters now."""
        return sum(len(waiters) for waiters in self.by_job.values())

    def add(self, job_id: str) -> Waiter:
        """Register first (rule 1): from now on an entry for the job reaches it."""
        waiter = Waiter(job_id, self._clock(), self._event())
        self.by_job.setdefault(job_id, []).append(waiter)
        self._unstarted += 1
        return waiter

    def start(self, waiter: Waiter, after: str) -> None:
        """Its probe answered: the job had not finished at stream id ``after``."""
        waiter.started, waiter.after = True, after
        self._unstarted -= 1
        self.changed.set()

    def remove(self, waiter: Waiter) -> None:
        """The call returned (answered, or cancelled, or failed)."""
        if not waiter.started:
            self._unstarted -= 1
            self.changed.set()
        waiters = self.by_job.get(waiter.job_id, [])
        if waiter in waiters:
            waiters.remove(waiter)
        if not waiters:
            self.by_job.pop(waiter.job_id, None)

    def ready(self) -> bool:
        """Waiters wait, and each has its start: the reader may choose where to read from."""
        return bool(self.by_job) and self._unstarted == 0

    def renew(self) -> Event:
        """A fresh change event, to wait on while not :meth:`ready`."""
        self.changed = self._event()
        return self.changed

    def position(self, position: str | None) -> str:
        """Where the reader reads from: on from ``position``, or from the earliest start
        when that is later (entries before it finished before every waiter looked)."""
        starts = [w.after for waiters in self.by_job.values() for w in waiters if w.started]
        if starts:
            earliest = min(starts, key=_id_key)
            if position is None or _id_key(earliest) > _id_key(position):
                position = earliest
        assert position is not None
        return position

    def dispatch(self, stream_id: str, fields: list[bytes]) -> int:
        """Hand an entry to the waiters of its job; how many it answered."""
        raw = entry_job_id(fields)
        waiters = self.by_job.get(raw.decode("utf-8", "replace")) if raw is not None else None
        if not waiters:
            return 0
        outcome = entry_outcome(self.queue, stream_id, fields)
        if outcome is None:
            return 0
        return sum(w.deliver(outcome) for w in waiters)

    def fail_all(self, error: BaseException) -> None:
        for waiters in self.by_job.values():
            for waiter in waiters:
                waiter.fail(error)

    def due(self, *, everyone: bool, gone_check: float) -> list[str]:
        """The jobs whose rows to re-read (rule 4): all after a reconnect (``everyone``),
        else those waited on longer than ``gone_check``."""
        now = self._clock()
        return [
            job_id
            for job_id, waiters in self.by_job.items()
            if any(w.started and (everyone or now - w.since >= gone_check) for w in waiters)
        ]

    def state_commands(self, ids: Sequence[str]) -> list[tuple[Arg, ...]]:
        ks = keyspace(self.queue)
        return [("HGET", ks.job(i), "state") for i in ids]

    def settled(self, ids: Sequence[str], states: Sequence[Any]) -> list[str]:
        """Of :meth:`state_commands`' jobs, those gone or finished: their rows to read."""
        return [i for i, state in zip(ids, states, strict=True) if _settled(state)]

    def row_commands(self, ids: Sequence[str]) -> list[tuple[Arg, ...]]:
        ks = keyspace(self.queue)
        return [("HGETALL", ks.job(i)) for i in ids]

    def answer_rows(self, ids: Sequence[str], rows: Sequence[Any]) -> None:
        """A gone row answers None, a finished one its outcome; a live one nothing."""
        for job_id, row in zip(ids, rows, strict=True):
            if isinstance(row, ServerError):
                continue
            info = read_job(job_id, row)
            outcome = None if info is None else row_outcome(info)
            if info is not None and outcome is None:
                continue  # live again (reprocessed, or an id re-used)
            for waiter in self.by_job.get(job_id, []):
                waiter.deliver(outcome)


def _settled(state: Any) -> bool:
    if isinstance(state, ServerError):
        return False
    if state is None:
        return True
    try:
        value = state.decode() if isinstance(state, bytes) else str(state)
        return JobState(value) in TERMINAL_STATES
    except ValueError:
        return False
