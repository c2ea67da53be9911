"""The cancellation bridge: the jobs a worker holds, and the one place that cancels them.

Rule 1: every claimed job has a :class:`Held` record (id, token, lease, its
``trio.CancelScope`` and ``CancelToken``) from the moment the claim answers until its
outcome is settled or handed back. The lease keeper reads this map; nobody else keeps one.
Rule 2: remote reasons cancel a job's scope only through :class:`InFlight`: a cancel
request (the job completes as cancelled), a lost lease (the job is never settled), a
shutdown past grace (the job is handed back to pending).
Rule 3: a cancel request that arrives before its claim answered is remembered for a
while, so the job is cancelled as soon as it is registered.
"""

from __future__ import annotations

import enum
from collections import OrderedDict

import attrs
import trio

from .._model.cancel import CancelToken

__all__ = ["Held", "InFlight", "Stop"]

_EARLY_CANCELS = 1024  # cancel requests kept for jobs not (yet) registered here
_EARLY_CANCEL_TTL = 30.0


class Stop(enum.Enum):
    """Why a job's scope was cancelled by the worker (None: it was not)."""

    CANCEL = "cancel"  # a cancel request: settle as cancelled
    LOST = "lost"  # the lease is gone: never settle
    SHUTDOWN = "shutdown"  # past grace: hand back to pending


@attrs.define(eq=False)
class Held:
    """One job this worker holds."""

    id: str
    token: int
    lease_ms: int
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    cancel_token: CancelToken = attrs.field(factory=CancelToken)
    stop: Stop | None = None
    settling: bool = False  # the outcome is being recorded: the keeper leaves it alone
    # a sync task's thread runs under a shield that only a lost lease, a shutdown past
    # grace or the task's timeout may cancel (a cancel request waits for the thread)
    hard_scope: trio.CancelScope | None = None

    def cancel(self, reason: str | None) -> None:
        self.cancel_token.cancel(reason)
        if self.stop is None:
            self.stop = Stop.CANCEL
        self.scope.cancel()

    def lose(self) -> None:
        """The lease is gone: cancel the scope; the outcome will not be settled."""
        self.stop = Stop.LOST
        self._cancel_hard()
        self.scope.cancel()

    def shut_down(self) -> None:
        if self.stop is not Stop.LOST:
            self.stop = Stop.SHUTDOWN
        self._cancel_hard()
        self.scope.cancel()

    def _cancel_hard(self) -> None:
        if self.hard_scope is not None:
            self.hard_scope.cancel()


@attrs.define(eq=False)
class InFlight:
    """The map ``job_id -> Held`` and the events that change it."""

    jobs: dict[str, Held] = attrs.field(factory=dict, init=False)
    _early: OrderedDict[str, tuple[float, str | None]] = attrs.field(
        factory=OrderedDict, init=False
    )
    _idle: trio.Event = attrs.field(factory=trio.Event, init=False)

    def __attrs_post_init__(self) -> None:
        self._idle.set()

    def __len__(self) -> int:
        return len(self.jobs)

    def add(self, job_id: str, token: int, lease_ms: int) -> Held:
        held = Held(job_id, token, lease_ms)
        self.jobs[job_id] = held
        if self._idle.is_set():
            self._idle = trio.Event()
        early = self._early.pop(job_id, None)
        if early is not None and trio.current_time() - early[0] < _EARLY_CANCEL_TTL:
            held.cancel(early[1])
        return held

    def remove(self, held: Held) -> None:
        if self.jobs.get(held.id) is held:
            del self.jobs[held.id]
            if not self.jobs:
                self._idle.set()

    async def wait_idle(self) -> None:
        """Return once no job is held."""
        await self._idle.wait()

    def request_cancel(self, job_id: str, reason: str | None) -> bool:
        """Cancel a held job (True), or remember the request for a claim in flight."""
        held = self.jobs.get(job_id)
        if held is not None:
            held.cancel(reason)
            return True
        self._early[job_id] = (trio.current_time(), reason)
        while len(self._early) > _EARLY_CANCELS:
            self._early.popitem(last=False)
        return False

    def lose(self, job_id: str, token: int) -> None:
        held = self.jobs.get(job_id)
        if held is not None and held.token == token:
            held.lose()

    def shut_down_all(self) -> None:
        for held in list(self.jobs.values()):
            held.shut_down()
