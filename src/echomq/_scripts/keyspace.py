"""The key builder: the one place that formats ``emq:{q}:...`` names.

Rule 1: every key of queue ``q`` carries the hash tag ``{q}``, so a queue lives in one
Redis Cluster slot and every script touches one slot.
Rule 2: queue names and job ids are gated here, before any I/O: 1..128 characters of
``[A-Za-z0-9._~-]``; anything else raises :class:`~echomq.errors.InvalidKey` (the rule
itself is ``_model/names.py``, re-exported here).
"""

from __future__ import annotations

import functools

import attrs

from .._model.names import check_dedup_key, check_group, check_id, check_queue, check_repeat_key
from ..errors import InvalidKey

__all__ = [
    "Keyspace",
    "keyspace",
    "check_dedup_key",
    "check_group",
    "check_id",
    "check_queue",
    "check_repeat_key",
    "remote_queue",
    "PREFIX",
]

PREFIX = "emq"


@attrs.frozen
class Keyspace:
    """All key names of one queue. Constructing it validates the queue name."""

    queue: str = attrs.field(converter=check_queue)

    @property
    def base(self) -> str:
        """The queue's root, ``emq:{q}:``; scripts derive per-job keys from it."""
        return f"{PREFIX}:{{{self.queue}}}:"

    @property
    def pending(self) -> str:
        return self.base + "pending"

    @property
    def active(self) -> str:
        return self.base + "active"

    @property
    def schedule(self) -> str:
        return self.base + "schedule"

    @property
    def dead(self) -> str:
        return self.base + "dead"

    @property
    def completed(self) -> str:
        return self.base + "completed"

    @property
    def cancelled(self) -> str:
        """Cancelled rows kept, scored by when their retention ends (as ``completed``)."""
        return self.base + "cancelled"

    @property
    def waiting(self) -> str:
        """Flow parents with open children (docs/flows.md); score = when they were added."""
        return self.base + "waiting"

    @property
    def completions(self) -> str:
        """The completions stream: one entry per finished job (docs/results.md)."""
        return self.base + "completions"

    @property
    def outbox(self) -> str:
        """Flow children's outcomes for parents on other queues, until the sweeper relayed
        them (stream; consumer group ``relay``; docs/flows.md "Across queues")."""
        return self.base + "outbox"

    @property
    def outbox_dead(self) -> str:
        """Outbox entries the parent's queue refused ``MAX_RELAY_TRIES`` times, set aside
        with the refusal so the relay goes on (stream; docs/flows.md "Across queues")."""
        return self.base + "outbox:dead"

    @property
    def meta(self) -> str:
        return self.base + "meta"

    @property
    def events(self) -> str:
        return self.base + "events"

    @property
    def control(self) -> str:
        """The workers' channel: what a worker acts on (cancel requests, jobs scheduled),
        so that it never reads the lifecycle events of every job (docs/keyspace.md)."""
        return self.base + "control"

    @property
    def wake(self) -> str:
        return self.base + "wake"

    def wake_direct(self, consumer: str) -> str:
        """One consumer's own wake list: a token here wakes that consumer and no other."""
        return f"{self.base}wake:{check_id(consumer)}"

    @property
    def metrics_completed(self) -> str:
        return self.base + "metrics:completed"

    @property
    def metrics_dead(self) -> str:
        """Dead-lettered jobs, ever (the ``dead`` outcome's total)."""
        return self.base + "metrics:dead"

    @property
    def metrics_cancelled(self) -> str:
        return self.base + "metrics:cancelled"

    @property
    def metrics_capped(self) -> str:
        """Rows / entries the count caps removed before their time (the memory guard)."""
        return self.base + "metrics:capped"

    def metrics_minute(self, outcome: str, minute: int) -> str:
        """One minute's counter of an outcome (``completed`` | ``dead`` | ``cancelled``);
        ``minute`` = server ms // 60000. The scripts derive it from the server clock."""
        return f"{self.base}metrics:{outcome}:{minute}"

    @property
    def sweep_guard(self) -> str:
        """SET NX PX guard so that one worker runs recovery per interval."""
        return self.base + "sweep_guard"

    # -- group lanes (docs/lanes.md); the scripts derive the same names from the base -----

    def lane(self, group: str) -> str:
        """A group's lane: its ready ids (a zset scored like ``pending``)."""
        return f"{self.base}g:{check_group(group)}:pending"

    def group_rate(self, group: str) -> str:
        """A group's current rate window: jobs started in it (a string with a TTL)."""
        return f"{self.base}g:{check_group(group)}:rate"

    def group_slide(self, group: str) -> str:
        """A group's sliding window: its starts of the last period (zset; score = ms)."""
        return f"{self.base}g:{check_group(group)}:slide"

    @property
    def gstate(self) -> str:
        """The groups' state (a hash): ``<group>`` -> its jobs held now (absent at 0),
        ``<group>:limit`` -> its own concurrency limit, ``<group>:rate`` -> ``<max>:<ms>``
        (``<max>:<ms>:sliding`` for a sliding window)."""
        return self.base + "gstate"

    @property
    def ring(self) -> str:
        """The groups that have ready work and may start a job now (zset; score = turn)."""
        return self.base + "gring"

    @property
    def limited(self) -> str:
        """The groups waiting for their rate window or a back-off (zset; score = ms it
        reopens)."""
        return self.base + "glimited"

    @property
    def groups(self) -> str:
        """Every group with waiting or active jobs (zset, score 0: by name)."""
        return self.base + "groups"

    @property
    def rate(self) -> str:
        """The queue's current rate window: jobs started in it (a string with a TTL)."""
        return self.base + "rate"

    @property
    def slide(self) -> str:
        """The queue's sliding window: its starts of the last period (zset; score = ms)."""
        return self.base + "slide"

    @property
    def repeat(self) -> str:
        """The repeat registry (a zset): key -> next slot ms, +inf while paused."""
        return self.base + "repeat"

    def repeat_record(self, key: str) -> str:
        """A repeatable's record (a hash): schedule, next slot, last run (docs/repeat.md)."""
        return f"{self.base}repeat:{check_repeat_key(key)}"

    def dedup(self, key: str) -> str:
        """A dedup key (a string): the id of the job holding it, expiring with its window."""
        return f"{self.base}dedup:{check_dedup_key(key)}"

    @property
    def cancels(self) -> str:
        """Active cancels with a grace: ids scored by the server ms their grace ends (the
        fence deadline); every worker's heartbeat fences the due ones (docs/runtime.md)."""
        return self.base + "cancels"

    @property
    def holds(self) -> str:
        """The claim holds of flows being cancelled or removed page by page: a hold's token
        scored by the server ms it ends (its latest end is the meta ``hold`` field, which
        the claim reads; docs/flows.md)."""
        return self.base + "holds"

    @property
    def workers(self) -> str:
        """The workers serving this queue: ids scored by their last heartbeat (server ms)."""
        return self.base + "workers"

    def worker(self, worker_id: str) -> str:
        """One worker's heartbeat record (a hash with a TTL)."""
        return f"{self.base}worker:{check_id(worker_id)}"

    @property
    def pattern(self) -> str:
        """A SCAN pattern matching every key of this queue."""
        return f"{PREFIX}:{{{self.queue}}}:*"

    def job(self, job_id: str) -> str:
        """The job's row (a hash)."""
        return f"{self.base}job:{check_id(job_id)}"

    def logs(self, job_id: str) -> str:
        """The job's log lines (a list)."""
        return self.job(job_id) + ":logs"

    def children(self, job_id: str) -> str:
        """A flow parent's children ids, in order (a list; docs/flows.md)."""
        return self.job(job_id) + ":children"

    def child_results(self, job_id: str) -> str:
        """A flow parent's finished children: child id -> outcome (a hash; docs/flows.md)."""
        return self.job(job_id) + ":results"

    def remote_children(self, job_id: str) -> str:
        """A flow parent's children on other queues: child id -> its queue, and after a
        ``#`` the child's generation the parent last heard of (a hash; :func:`remote_queue`
        reads the queue)."""
        return self.job(job_id) + ":remote"

    def lock(self, job_id: str) -> str:
        """The optional operator lock (a string) that makes remove refuse."""
        return self.job(job_id) + ":lock"


def queues_pattern() -> str:
    """A SCAN pattern that finds every queue's meta hash."""
    return f"{PREFIX}:{{*}}:meta"


@functools.lru_cache(maxsize=1024)
def _cached(queue: str) -> Keyspace:
    return Keyspace(queue)


def keyspace(queue: object) -> Keyspace:
    """``Keyspace(queue)``, memoised per name: the hot verbs build one per call.

    Raises:
        InvalidKey: as ``Keyspace`` (a bad name is never cached).
    """
    if not isinstance(queue, str):
        raise InvalidKey(f"queue name must be a str, not {type(queue).__name__}")
    return _cached(queue)


def remote_queue(value: bytes | str) -> str:
    """The queue of a remote child, from its entry in its parent's ``:remote`` hash:
    ``<queue>``, or ``<queue>#<generation>`` once the parent heard of a re-run
    (docs/flows.md "Across queues"; queue names have no ``#``)."""
    entry = value.decode() if isinstance(value, bytes) else value
    return entry.partition("#")[0]
