"""echomq: a Celery-style task queue for Trio, on Redis 7 / Valkey.

Layout (imports point down; docs/design.md draws it from the tree):
    app, canvas, sync, asyncio, cli/, dashboard/, archive/   what users touch
    _worker/                          the Trio runtime
    _client/, results, events         services that outlive one call
    jobs/, admin/, cancel, stalled,   the verbs: one async function per transition
    repeat, flows, completions
    _scripts/                         the Lua, its calls, the reply table, the key builder
    _wire/                            RESP connections, pub/sub, the asyncio and blocking drivers
    _model/                           pure values and rules
"""

from __future__ import annotations

from . import admin, cancel, config, errors, flows, jobs, repeat, stalled
from ._model.job import Claimed, JobInfo, Sweep
from ._model.states import JobState
from ._scripts.replies import CompleteResult, ExtendResult
from ._wire.connection import Connection
from ._wire.dial import connect
from ._worker.hooks import Enqueueing, Hooks, JobOutcome
from ._worker.worker import Worker
from .app import EnqueueOptions, Job, Queue, TaskHandle, TaskOptions, current_job
from .cancel import CancelToken
from .canvas import FlowHandle, Signature, chain, chord, flow, group
from .config import ConnectionConfig, WorkerConfig, parse_url
from .errors import (
    ActiveJobs,
    AuthenticationError,
    ChildFailed,
    ClusterDown,
    ClusterError,
    CodecMismatch,
    ConnectionLost,
    CrossSlot,
    DuplicateJob,
    DuplicateStep,
    EchoMQError,
    FlowStateError,
    HasOpenChildren,
    InvalidArgument,
    InvalidKey,
    JobCancelled,
    JobExpired,
    JobFailed,
    JobGone,
    JobLocked,
    NotACluster,
    NotActive,
    NotCancellable,
    NotDead,
    NotPaused,
    PayloadTooLarge,
    PermissionDenied,
    QueueNotFound,
    RateLimited,
    RepeatFormatError,
    RepeatNotFound,
    Retry,
    SchemaMismatch,
    ScriptError,
    SerializationError,
    ServerError,
    SoftTimeLimit,
    StaleToken,
    StepFailed,
    TaskNotRegistered,
    TLSError,
    Unavailable,
    UnencodableArgument,
    WrongEventLoop,
)
from .flows import ChildFailure

__version__ = "0.2.0"

__all__ = [
    "ActiveJobs",
    "AuthenticationError",
    "CancelToken",
    "ChildFailed",
    "ChildFailure",
    "Claimed",
    "ClusterDown",
    "ClusterError",
    "CodecMismatch",
    "CompleteResult",
    "Connection",
    "ConnectionConfig",
    "ConnectionLost",
    "CrossSlot",
    "DuplicateJob",
    "DuplicateStep",
    "EchoMQError",
    "EnqueueOptions",
    "Enqueueing",
    "ExtendResult",
    "FlowHandle",
    "FlowStateError",
    "HasOpenChildren",
    "Hooks",
    "InvalidArgument",
    "InvalidKey",
    "Job",
    "JobCancelled",
    "JobExpired",
    "JobFailed",
    "JobGone",
    "JobInfo",
    "JobLocked",
    "JobOutcome",
    "JobState",
    "NotACluster",
    "NotActive",
    "NotCancellable",
    "NotDead",
    "NotPaused",
    "PayloadTooLarge",
    "PermissionDenied",
    "Queue",
    "QueueNotFound",
    "RateLimited",
    "RepeatFormatError",
    "RepeatNotFound",
    "Retry",
    "SchemaMismatch",
    "ScriptError",
    "SerializationError",
    "ServerError",
    "Signature",
    "SoftTimeLimit",
    "StaleToken",
    "StepFailed",
    "Sweep",
    "TLSError",
    "TaskHandle",
    "TaskNotRegistered",
    "TaskOptions",
    "Unavailable",
    "UnencodableArgument",
    "Worker",
    "WorkerConfig",
    "WrongEventLoop",
    "__version__",
    "admin",
    "cancel",
    "chain",
    "chord",
    "config",
    "connect",
    "current_job",
    "errors",
    "flow",
    "flows",
    "group",
    "jobs",
    "parse_url",
    "repeat",
    "stalled",
]


def _fixup_module_metadata() -> None:
    """The error tree reads ``echomq.JobGone`` in tracebacks, as it is spelled by users
    (trio's ``fixup_module_metadata``). Only the exceptions: an attrs class resolves its
    string annotations through its own module."""
    for name in errors.__all__:
        getattr(errors, name).__module__ = __name__


_fixup_module_metadata()
del _fixup_module_metadata
