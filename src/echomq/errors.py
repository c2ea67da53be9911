"""Every error echomq raises, in one tree.

::

    EchoMQError
    ├── InvalidKey           bad job id / queue name (also ValueError), before any I/O
    ├── InvalidArgument      a bad lease, count, priority... (also ValueError), before any I/O
    │   ├── DuplicateStep    a durable step's name used twice in one run
    │   └── CrossSlot        a cluster pipeline whose keys span slots, refused before any I/O
    ├── ConnectionLost       the wire dropped a command in flight, or could not connect
    ├── TLSError             the TLS handshake failed (certificate, protocol); not retried
    ├── ServerError          Redis answered an error we do not map
    │   ├── ScriptError      a script answered a reply we cannot decode
    │   ├── AuthenticationError  wrong or missing credentials (WRONGPASS, NOAUTH); not retried
    │   ├── PermissionDenied an ACL user lacks a command, key or channel (NOPERM); not retried
    │   ├── Unavailable      not run, "try later" (LOADING, BUSY, TRYAGAIN...) past connect_timeout
    │   └── ClusterError     a Redis Cluster could not serve the command
    │       ├── NotACluster  a redis+cluster:// URL names a node with cluster mode off
    │       └── ClusterDown  slots not covered (CLUSTERDOWN) past connect_timeout; an Unavailable
    ├── JobGone              no such row (also LookupError)
    ├── QueueNotFound        no such queue (no meta hash): never used, or obliterated
    ├── StaleToken           the caller's fencing token is not the row's token
    ├── NotActive            the id has left the active set (a reaped lease is not revived)
    ├── NotCancellable       cancel asked of a job that is completed or dead
    ├── NotDead              reprocess asked of a job that is not dead
    ├── NotPaused            obliterate asked of a queue that is not paused
    ├── ActiveJobs           obliterate (unforced) of a queue with jobs in flight
    ├── JobLocked            remove asked of a job under an operator lock
    ├── DuplicateJob         enqueue with a job_id whose row already exists
    ├── RepeatNotFound       a repeat verb named a key with no record (also LookupError)
    ├── RepeatFormatError    a repeat record written by another echomq (its layout version)
    ├── HasOpenChildren      remove (unforced) of a flow parent whose children are open
    ├── FlowStateError       a flow's page names a parent that is not held and waiting
    ├── SchemaMismatch       a queue's data layout (schema_version) is not this echomq's
    ├── TaskNotRegistered    a claimed job names a task this worker does not know
    ├── SerializationError   a payload that cannot be encoded or decoded (also ValueError)
    │   ├── PayloadTooLarge  a payload or result over the size limit, before any write
    │   ├── UnencodableArgument  an argument the codec cannot encode, before any I/O
    │   └── CodecMismatch    a payload written by another codec than the queue's
    ├── JobFailed            from handle.result(): the job is dead; carries the error text
    ├── JobCancelled         from handle.result() and CancelToken.check()
    ├── JobExpired           from handle.result(): the job's deadline passed before it started
    ├── SoftTimeLimit        raised inside a job that ran past its soft_timeout (it may clean up)
    ├── StepFailed           a durable step replayed with the error an earlier run kept
    ├── ChildFailed          a spawned child did not complete, under policy fail (job.wait_children)
    └── WrongEventLoop       an asyncio twin (adelay, aapply...) called with no asyncio loop (trio)

    Retry(delay=...)         raised by a task to ask for a retry; not an error
    RateLimited(retry_after=...)  raised by a task to back off (a 429): not a failure

Script refusals and server error replies reach these classes through one table,
``_scripts/replies.py``. Two errors are transient: ``ConnectionLost`` (the command may have
run; the verbs' fencing makes a retry safe) and ``Unavailable`` (the server did not run it
and said "later"; ``ClusterDown`` is one). :data:`TRANSIENT` names both: code that retries
on it (the worker's loops, your own) never loops on a bad password, a missing permission
or a certificate nobody trusts.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

__all__ = [
    "EchoMQError",
    "InvalidKey",
    "InvalidArgument",
    "DuplicateStep",
    "CrossSlot",
    "ConnectionLost",
    "TLSError",
    "ServerError",
    "ScriptError",
    "AuthenticationError",
    "PermissionDenied",
    "Unavailable",
    "ClusterError",
    "NotACluster",
    "ClusterDown",
    "JobGone",
    "QueueNotFound",
    "StaleToken",
    "NotActive",
    "NotCancellable",
    "NotDead",
    "NotPaused",
    "ActiveJobs",
    "JobLocked",
    "DuplicateJob",
    "RepeatNotFound",
    "RepeatFormatError",
    "HasOpenChildren",
    "FlowStateError",
    "SchemaMismatch",
    "TaskNotRegistered",
    "SerializationError",
    "PayloadTooLarge",
    "UnencodableArgument",
    "CodecMismatch",
    "JobFailed",
    "JobCancelled",
    "JobExpired",
    "SoftTimeLimit",
    "StepFailed",
    "ChildFailed",
    "WrongEventLoop",
    "Retry",
    "RateLimited",
]


class EchoMQError(Exception):
    """The root of every error echomq raises."""


class InvalidKey(EchoMQError, ValueError):
    """A job id or queue name is not 1..128 characters of ``[A-Za-z0-9._~-]``.

    Raised by the key builder, before any I/O.
    """


class InvalidArgument(EchoMQError, ValueError):
    """A lease, count, delay, priority or similar argument is out of range.

    Raised before any I/O.
    """


class ConnectionLost(EchoMQError, ConnectionError):
    """The connection dropped while a command was in flight (or could not be made).

    The command may or may not have run on the server; it is never replayed, because
    scripts are not idempotent.
    """


class TLSError(EchoMQError):
    """The TLS handshake failed: the certificate did not verify, or the peer does not
    speak TLS as configured. Not a ``ConnectionLost``: trying again cannot fix it.
    """


class ServerError(EchoMQError):
    """Redis answered an error reply that echomq does not map to a typed refusal."""


class ScriptError(ServerError):
    """A script answered a reply whose shape the verb cannot decode."""


class AuthenticationError(ServerError):
    """The server refused the credentials (``WRONGPASS``), or needs some and none were
    given (``NOAUTH``). Not a ``ConnectionLost``: trying again cannot fix it.
    """


class PermissionDenied(ServerError):
    """The ACL user may not run that command, or touch that key or channel (``NOPERM``;
    inside a script, Redis 7.0 words it "The user executing the script can't ...").

    Not transient: retrying cannot grant a permission. ``command`` is what was sent (a
    command's name, or ``script <name>``), ``missing`` what the user lacks, in words (the
    command, "a key", "a channel", or "a command the script calls"); the message has both,
    in one line (docs/operations.md, "Redis ACLs", has each role's rule).
    """

    def __init__(
        self, message: str, *, command: str | None = None, missing: str | None = None
    ) -> None:
        super().__init__(message)
        self.command = command
        self.missing = missing

    def __reduce__(self) -> tuple[Any, ...]:
        return (_permission_denied, (str(self), self.command, self.missing))


def _permission_denied(message: str, command: str | None, missing: str | None) -> PermissionDenied:
    return PermissionDenied(message, command=command, missing=missing)


class CrossSlot(InvalidArgument):
    """A pipeline on a Redis Cluster names keys of more than one slot.

    Every command of a pipeline goes to one node; echomq's keys of one queue share a slot
    (the ``{q}`` hash tag). Raised before any I/O.
    """


class Unavailable(ServerError):
    """The server did not run the command and said "try later", for longer than
    ``connect_timeout``: ``LOADING`` (a restart reading its data), ``BUSY`` (a script past
    its time limit), ``MASTERDOWN``, ``TRYAGAIN`` (a cluster slot half-way through a
    migration), ``CLUSTERDOWN``, ``UNBLOCKED``, or a script refused with "non local key"
    mid-migration (it stopped before its first write).

    Transient, like ``ConnectionLost``: nothing ran, so sending it again later is safe.
    The wire already did so with backoff until ``connect_timeout``; the worker's loops and
    its settle path go on trying within their own bounds.
    """


class ClusterError(ServerError):
    """A Redis Cluster could not serve the command (see the subclasses)."""


class NotACluster(ClusterError):
    """A ``redis+cluster://`` URL names a server whose cluster mode is off.

    Use a ``redis://`` URL for a single server.
    """


class ClusterDown(ClusterError, Unavailable):
    """The cluster answered ``CLUSTERDOWN`` (a slot has no master: not covered, or a
    failover is under way) for longer than ``connect_timeout``. Transient (an
    ``Unavailable``): a failover ends by itself; slots never assigned do not."""


#: the errors worth trying again later (``except TRANSIENT:``): the connection dropped or
#: could not be made (``ConnectionLost``), or the server said "later" (``Unavailable``)
TRANSIENT: tuple[type[EchoMQError], ...] = (ConnectionLost, Unavailable)


class JobGone(EchoMQError, LookupError):
    """The job has no row (it never existed, was removed, or was trimmed)."""


class QueueNotFound(EchoMQError, LookupError):
    """The queue does not exist: it has no meta hash (``emq:{q}:meta``), so no worker,
    enqueue or operator verb has used it yet, or it was obliterated. ``queue`` names it."""

    def __init__(self, queue: str) -> None:
        super().__init__(f"no queue {queue!r}")
        self.queue = queue

    def __reduce__(self) -> tuple[Any, ...]:
        return (QueueNotFound, (self.queue,))


class StaleToken(EchoMQError):
    """The caller's fencing token is not the row's ``token``: it no longer holds the job."""


class NotActive(EchoMQError):
    """The token still matches but the id has left the active set (reaped or swept)."""


class NotCancellable(EchoMQError):
    """The job is completed or dead: there is nothing to cancel."""


class NotDead(EchoMQError):
    """Reprocess was asked of a job that is not in the dead set."""


class NotPaused(EchoMQError):
    """Obliterate was asked of a queue that is not paused."""


class ActiveJobs(EchoMQError):
    """Obliterate (without force) was asked of a queue with jobs in flight."""


class JobLocked(EchoMQError):
    """The job is under an operator lock; remove refuses it."""


class HasOpenChildren(EchoMQError):
    """Remove was asked of a flow parent whose children are still open (use force:
    ``flows.remove_flow`` removes the subtree; docs/flows.md)."""


class FlowStateError(EchoMQError):
    """A page of a flow named a parent that is not a held waiting parent (its earlier
    pages are missing, or it was already released, cancelled or removed)."""


class DuplicateJob(EchoMQError):
    """Enqueue with an explicit ``job_id`` whose row already exists."""


class RepeatNotFound(EchoMQError, LookupError):
    """A repeat verb (remove, pause, resume, get) named a key with no record."""


class RepeatFormatError(EchoMQError):
    """A repeat record's layout version (its field ``v``) is not this echomq's: it was
    written by a newer echomq (upgrade this one) and is refused, never misread. Removing
    such a record is allowed."""


class SchemaMismatch(EchoMQError):
    """A queue's data layout is not the one this echomq knows: its ``schema_version``
    (in ``emq:{q}:meta``) is newer (upgrade echomq) or older (migrate the queue; the
    message says how). A worker refuses to serve such a queue, at start. Not retried.
    """

    def __init__(self, message: str, *, queue: str = "", found: object = None) -> None:
        super().__init__(message)
        self.queue = queue
        self.found = found

    def __reduce__(self) -> tuple[Any, ...]:
        return (_schema_mismatch, (str(self), self.queue, self.found))


def _schema_mismatch(message: str, queue: str, found: object) -> SchemaMismatch:
    return SchemaMismatch(message, queue=queue, found=found)


class TaskNotRegistered(EchoMQError, LookupError):
    """A claimed job names a task that is not registered on this queue."""


class SerializationError(EchoMQError, ValueError):
    """A payload or result cannot be encoded (or decoded) by the queue's codec."""


class PayloadTooLarge(SerializationError):
    """A payload or result is over the size limit (``echomq.config.max_payload()``).

    Raised before any write; ``size`` and ``limit`` are in bytes.
    """

    def __init__(self, name: str, size: int, limit: int) -> None:
        super().__init__(f"{name} is {size} bytes, over the limit of {limit} bytes")
        self.name = name
        self.size = size
        self.limit = limit

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.name, self.size, self.limit))


class UnencodableArgument(SerializationError):
    """An argument the queue's codec cannot encode, refused before any I/O.

    ``argument`` names it: its parameter's name (``str``) when the task's signature
    tells, else its position (``int``) or keyword; ``kind`` is the refused value's type
    (None when the value is refused for its content, e.g. a NaN float in JSON).
    """

    def __init__(
        self, argument: int | str, detail: str, kind: str | None = None, *, codec: str = "json"
    ) -> None:
        where = f"argument {argument}" if isinstance(argument, int) else f"argument {argument!r}"
        super().__init__(f"{where} cannot be encoded by the {codec} codec: {detail}")
        self.argument = argument
        self.detail = detail
        self.kind = kind
        self.codec = codec

    def __reduce__(self) -> tuple[Any, ...]:
        return (_unencodable, (self.argument, self.detail, self.kind, self.codec))


def _unencodable(
    argument: int | str, detail: str, kind: str | None, codec: str
) -> UnencodableArgument:
    return UnencodableArgument(argument, detail, kind, codec=codec)


class CodecMismatch(SerializationError):
    """A payload written by another codec than the queue's (``found``); the worker fails
    that job with this reason and goes on."""

    def __init__(self, codec: str, found: str) -> None:
        super().__init__(
            f"the payload was written by the {found} codec, this queue's codec is {codec}: "
            f"give producers and workers the same Queue(..., codec=...)"
        )
        self.codec = codec
        self.found = found

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.codec, self.found))


class JobFailed(EchoMQError):
    """The job was dead-lettered; ``error`` carries its last error text."""

    def __init__(self, job_id: str, error: str | None) -> None:
        super().__init__(f"job {job_id} failed: {error}")
        self.job_id = job_id
        self.error = error

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.job_id, self.error))


class JobCancelled(EchoMQError):
    """The job was cancelled; ``reason`` is the reason given (or None)."""

    def __init__(self, reason: str | None = None, *, job_id: str | None = None) -> None:
        super().__init__(f"job {job_id} cancelled: {reason}" if job_id else f"cancelled: {reason}")
        self.reason = reason
        self.job_id = job_id

    def __reduce__(self) -> tuple[Any, ...]:
        return (_cancelled, (type(self), self.reason, self.job_id))


class JobExpired(EchoMQError):
    """The job's deadline (``expires=``) passed before it started: it never ran, and ended
    in state ``expired`` (docs/runtime.md "Expiry")."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"job {job_id} expired: its deadline passed before it started")
        self.job_id = job_id

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.job_id,))


class DuplicateStep(InvalidArgument):
    """A durable step's name was used twice in one run of a job (docs/steps.md)."""


class ChildFailed(EchoMQError):
    """A child of the job did not complete (dead, cancelled or removed) under policy
    ``fail``: raised by ``job.wait_children()``; the job then dies without a retry, as a
    flow parent does (docs/flows.md)."""


class StepFailed(EchoMQError):
    """A durable step whose committed outcome is an error: an earlier run kept it
    (``job.step(..., keep_errors=...)``), so this run raises it without running the step.
    ``error`` is the kept ``Type: message`` text."""

    def __init__(self, name: str, error: str) -> None:
        super().__init__(f"step {name!r} failed in an earlier run: {error}")
        self.name = name
        self.error = error

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.name, self.error))


class SoftTimeLimit(EchoMQError):
    """Raised inside a job that ran past its task's ``soft_timeout``.

    The job may catch it to clean up (and even return a value); uncaught, it is the
    attempt's failure (retried like any). The hard ``timeout`` still stops the job.
    An async task gets it at its current (or next) await; a thread task at its next
    Python instruction (a blocking C call finishes first); a process task by a timer signal
    (docs/runtime.md, "Time limits").
    """

    def __init__(self, message: str = "ran past its soft time limit") -> None:
        super().__init__(message)


class WrongEventLoop(EchoMQError, RuntimeError):
    """An asyncio twin (``adelay``, ``aapply``, ``aresult``, ``aopen``...) was called where
    no asyncio event loop runs: under trio, call the trio verb (``delay``, ``apply``,
    ``result``) instead; from plain blocking code, the ``*_sync`` one. Raised before any I/O.
    """


class Retry(Exception):
    """Raised by a task to ask for a retry after ``delay`` seconds (None: the task's backoff).

    A retry counts as a failure against ``max_attempts``, as in Celery and arq. A delay
    that cannot be scheduled (not a real number, NaN, inf, or more than 2^40 ms) makes
    the job dead with that reason; a negative delay means "now".
    """

    def __init__(self, delay: float | None = None, reason: str = "retry requested") -> None:
        super().__init__(reason)
        self.delay = delay
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.delay, self.reason))


class RateLimited(Exception):
    """Raised by a task whose upstream said "too many requests, come back in
    ``retry_after``" (seconds, or a timedelta): BullMQ's ``RateLimitError``.

    The job goes back to the schedule until then **without counting a failure** (its
    attempts budget is untouched), and its group (a grouped job) or else its whole queue
    claims nothing more until then, on the server clock (docs/lanes.md). A ``retry_after``
    that cannot be scheduled (not a real number, NaN, inf, negative, or more than 2^40 ms)
    makes the job dead with that reason.
    """

    def __init__(self, retry_after: float | timedelta = 1.0, reason: str = "rate limited") -> None:
        super().__init__(reason)
        self.retry_after = retry_after
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.retry_after, self.reason))


def _cancelled(cls: type[JobCancelled], reason: str | None, job_id: str | None) -> JobCancelled:
    """Unpickle a JobCancelled (its job_id is keyword-only)."""
    return cls(reason, job_id=job_id)
