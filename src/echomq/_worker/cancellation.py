"""The held-job table: the jobs a worker holds, and the one place that cancels them.

Rule 1: every claimed job has a :class:`Held` record (its queue, id, token, lease, its
``CancelToken``), filed by queue, then by id (a worker may serve several queues, and a job
id is unique within its queue only), from the moment the claim answers until its outcome
is settled or handed back (:meth:`InFlight.finish`). The lease keeper reads this table;
nobody else keeps one.
A job finished without being settled (a shutdown past grace, a worker cancelled from
outside) joins the table's hand-back list, which the worker releases to pending.
Rule 2: remote reasons cancel a job's scope only through :class:`InFlight`: a cancel
request (the job completes as cancelled), a lost lease (the job is never settled), a
shutdown past grace (the job is handed back to pending), a fence (a cancel whose grace ran
out: the job was settled cancelled in Redis and its token bumped; it is stopped hard and
never settled here).
Rule 3: a cancel request that arrives before its claim answered is remembered for a
while, so the job is cancelled as soon as it is registered.
Rule 4: a cancel with a grace arms the job's fence time (``fence_at``, trio time): the
escalator (``escalation.py``) fences it in Redis then, unless it stopped first. A token
found stale after a cancel request is that fence (done by another worker's heartbeat).
Stopping hard means: the job's scope and its hard scope are cancelled, so a thread task
is abandoned (it runs on; its outcome is never used) and a process task's child killed.
Rule 5: which scope a stop cancels. A job runs its handler in its slot task's scope
(``pool.SlotScope``, shared by the jobs that slot task runs back to back): while its
handler runs, that scope is the job's and no other job's (``Held.running``), so a stop
cancels ``running`` while it is set. Before the handler runs (and after it is out), a stop
cancels the job's own scope (``Held.scope``, made when first asked for) and sets ``stop``:
the runner cancels the slot scope before the handler starts; after the handler is out, a
cancel of its own scope, which nothing runs in, has no effect.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Collection
from typing import TYPE_CHECKING

import attrs
import trio

from .._model.cancel import CancelToken

if TYPE_CHECKING:
    from .context import Job
    from .pool import SlotScope

__all__ = ["SETTLED_ELSEWHERE", "Held", "InFlight", "Stop"]

_EARLY_CANCELS = 1024  # cancel requests kept for jobs not (yet) registered here
_EARLY_CANCEL_TTL = 30.0


class Stop(enum.Enum):
    """Why a job's scope was cancelled by the worker (None: it was not)."""

    CANCEL = "cancel"  # a cancel request: settle as cancelled
    LOST = "lost"  # the lease is gone: never settle
    SHUTDOWN = "shutdown"  # past grace: hand back to pending
    FENCED = "fenced"  # a cancel's grace ran out: settled cancelled by the fence; never settle
    # the job moved itself out of active (a durable sleep: the schedule; a wait for its
    # children: waiting): never settle
    SLEPT = "slept"


# stops after which the server already has the job's next state: nothing settles or hands
# it back
SETTLED_ELSEWHERE = (Stop.LOST, Stop.FENCED, Stop.SLEPT)


@attrs.define(eq=False)
class Held:
    """One job this worker holds."""

    id: str
    token: int
    lease_ms: int
    queue: str = ""  # the queue it was claimed from
    _scope: trio.CancelScope | None = attrs.field(default=None, init=False)
    # rule 5: the scope of the slot task that carries it; the same while its handler runs
    slot: SlotScope | None = attrs.field(default=None, init=False)
    running: SlotScope | None = attrs.field(default=None, init=False)
    _cancel_token: CancelToken | None = attrs.field(default=None, init=False)
    stop: Stop | None = None
    settling: bool = False  # the outcome is being recorded: the keeper leaves it alone
    # a sync task's thread runs under a shield that only a lost lease, a shutdown past
    # grace, a fence or the task's timeout may cancel (a cancel request waits for it)
    hard_scope: trio.CancelScope | None = None
    task: str | None = None  # the task's name, once the payload is decoded (the tally's)
    fence_at: float | None = None  # rule 4: when the cancel's grace runs out (trio time)
    ran: float | None = None  # the handler's run time, seconds (None: it did not run)
    # how the settler counted it (completed, retried, dead, cancelled, lost): the run's span
    recorded: str | None = None
    waiting: bool = False  # prefetched: claimed, waiting for a slot (claims.py rule 5)
    claimed_at: float = 0.0  # perf_counter() when its claim answered (tally.py rule 3)
    # with hooks (hooks.py): the run's Job, and what its run raised (the outcome hooks')
    job: Job | None = None
    exception: BaseException | None = None

    @property
    def scope(self) -> trio.CancelScope:
        """The job's own scope (rule 5; made when first asked for: the runner runs a job in
        its slot task's scope instead)."""
        scope = self._scope
        if scope is None:
            scope = self._scope = trio.CancelScope()
        return scope

    @property
    def cancel_token(self) -> CancelToken:
        """The job's :class:`CancelToken` (made when first asked for: most jobs never are)."""
        token = self._cancel_token
        if token is None:
            token = self._cancel_token = CancelToken()
        return token

    def cancel(self, reason: str | None) -> None:
        self.cancel_token.cancel(reason)
        if self.stop is None:
            self.stop = Stop.CANCEL
        self._cancel_scope()

    def lose(self) -> None:
        """The lease is gone: stop it hard; the outcome will not be settled. After a cancel
        request, a stale token is the cancel's fence (rule 4)."""
        if self.stop is Stop.SLEPT:  # it left active by itself
            return
        if self.stop in (Stop.CANCEL, Stop.FENCED):
            self.fence()
            return
        self.stop = Stop.LOST
        self._cancel_hard()
        self._cancel_scope()

    def fence(self) -> None:
        """The attempt is fenced (settled cancelled in Redis): stop it hard, never settle."""
        self.cancel_token.cancel(None)
        self.stop = Stop.FENCED
        self.fence_at = None
        self._cancel_hard()
        self._cancel_scope()

    def slept(self) -> None:
        """The job moved itself out of active (``sleep.lua``, ``wait_children.lua``): stop
        it; never settle."""
        self.stop = Stop.SLEPT
        self._cancel_scope()

    def shut_down(self) -> None:
        if self.stop not in SETTLED_ELSEWHERE:
            self.stop = Stop.SHUTDOWN
        self._cancel_hard()
        self._cancel_scope()

    def _cancel_scope(self) -> None:
        """Rule 5: the scope its handler runs in now, or its own."""
        running = self.running
        (running if running is not None else self.scope).cancel()

    def _cancel_hard(self) -> None:
        if self.hard_scope is not None:
            self.hard_scope.cancel()


Key = tuple[str, str]  # (queue, job id): an early cancel's
Returned = tuple[str, str, int]  # (queue, job id, token): a job to hand back


@attrs.define(eq=False)
class InFlight:
    """The held jobs, ``queue -> job_id -> Held``, and the events that change them.
    ``queue``: the queue a call names when it names none (the worker's first)."""

    queue: str = ""
    # rule 1: per queue, its held jobs by id (a queue's table stays once made)
    _tables: dict[str, dict[str, Held]] = attrs.field(factory=dict, init=False)
    _count: int = attrs.field(default=0, init=False)  # held jobs, every queue's
    # rule 1: the jobs finished unsettled, for the worker to release to pending
    hand_back: list[Returned] = attrs.field(factory=list, init=False)
    _early: OrderedDict[Key, tuple[float, str | None, float | None, bool]] = attrs.field(
        factory=OrderedDict, init=False
    )
    _idle: trio.Event = attrs.field(factory=trio.Event, init=False)
    _armed: trio.Event = attrs.field(factory=trio.Event, init=False)

    def __attrs_post_init__(self) -> None:
        self._idle.set()

    def __len__(self) -> int:
        return self._count

    def held(self) -> list[Held]:
        """Every held job, of every queue (a list: the table may change while it is read;
        from another thread, this raises RuntimeError when it changes under the read)."""
        return [held for table in list(self._tables.values()) for held in table.values()]

    def get(self, job_id: str, queue: str | None = None) -> Held | None:
        """The held job ``job_id`` of ``queue`` (default: the table's), or None."""
        table = self._tables.get(self.queue if queue is None else queue)
        return None if table is None else table.get(job_id)

    def held_in(self, queue: str) -> int:
        """How many jobs of ``queue`` are held (running, settling or prefetched)."""
        table = self._tables.get(queue)
        return 0 if table is None else len(table)

    def add(self, job_id: str, token: int, lease_ms: int, queue: str | None = None) -> Held:
        queue = self.queue if queue is None else queue
        held = Held(job_id, token, lease_ms, queue)
        table = self._tables.get(queue)
        if table is None:
            table = self._tables[queue] = {}
        if job_id not in table:
            self._count += 1
        table[job_id] = held
        if self._idle.is_set():
            self._idle = trio.Event()
        early = self._early.pop((queue, job_id), None) if self._early else None
        if early is not None and trio.current_time() - early[0] < _EARLY_CANCEL_TTL:
            at, reason, grace, fenced = early
            self._apply(held, reason, None if grace is None else at + grace, fenced)
        return held

    def finish(self, helds: list[Held], settled: Collection[Held] | None = None) -> None:
        """``helds`` are done: they leave the table. ``settled``: those whose outcome the
        server has (None: every one); the others are handed back, unless recovery or a
        fence owns them (a lost lease, a fence)."""
        tables = self._tables
        for held in helds:
            table = tables.get(held.queue)
            if table is not None and table.get(held.id) is held:
                del table[held.id]
                self._count -= 1
        if settled is not None and len(settled) < len(helds):
            for held in helds:
                if held not in settled and held.stop not in SETTLED_ELSEWHERE:
                    self.hand_back.append((held.queue, held.id, held.token))
        if not self._count:
            self._idle.set()

    def give_back(self, helds: list[Held]) -> None:
        """Jobs that never started (prefetched, or claimed as the worker stops): out of the
        table and onto the hand-back list."""
        self.finish(helds, ())

    def take_hand_back(self) -> list[Returned]:
        """The hand-back list, emptied."""
        pending, self.hand_back = self.hand_back, []
        return pending

    async def wait_idle(self) -> None:
        """Return once no job is held."""
        await self._idle.wait()

    def request_cancel(
        self,
        job_id: str,
        reason: str | None,
        *,
        grace: float | None = None,
        fenced: bool = False,
        queue: str | None = None,
    ) -> bool:
        """Cancel a held job of ``queue`` (default: the table's) (True), or remember the
        request for a claim in flight.

        ``grace`` (seconds): arm the job's fence time (rule 4). ``fenced``: the attempt is
        fenced already: stop it hard now.
        """
        now = trio.current_time()
        queue = self.queue if queue is None else queue
        held = self.get(job_id, queue)
        if held is not None:
            self._apply(held, reason, None if grace is None else now + grace, fenced)
            return True
        self._early[queue, job_id] = (now, reason, grace, fenced)
        while len(self._early) > _EARLY_CANCELS:
            self._early.popitem(last=False)
        return False

    def _apply(self, held: Held, reason: str | None, fence_at: float | None, fenced: bool) -> None:
        held.cancel(reason)
        if fenced:
            held.fence()
        elif fence_at is not None and held.stop is Stop.CANCEL:
            if held.fence_at is None or fence_at < held.fence_at:
                held.fence_at = fence_at
                self._armed.set()
                self._armed = trio.Event()

    async def wait_armed(self) -> None:
        """Return when a fence time is armed (or moved sooner)."""
        await self._armed.wait()

    def next_fence(self) -> float | None:
        """The earliest armed fence time of a held job (trio time), or None."""
        times = [h.fence_at for h in self.held() if h.fence_at is not None]
        return min(times) if times else None

    def due_fences(self, now: float) -> list[Held]:
        """Held jobs whose fence time has come."""
        return [h for h in self.held() if h.fence_at is not None and h.fence_at <= now]

    def lose(self, job_id: str, token: int, queue: str | None = None) -> None:
        held = self.get(job_id, queue)
        if held is not None and held.token == token:
            held.lose()

    def shut_down_all(self) -> None:
        for held in self.held():
            held.shut_down()
