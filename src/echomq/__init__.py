"""echomq: a Celery-style task queue for Trio, on Redis 7 / Valkey.

Layout (imports point down):
    app / worker / cli / dashboard    what users touch
    jobs, admin, stalled, cancel      the verbs: one async function per transition
    _redis                            the wire, the key builder, the scripts, the reply table
    _model                            pure values and rules
"""

from __future__ import annotations

from . import admin, cancel, errors, jobs, stalled
from ._model.job import Claimed, JobInfo, Sweep
from ._model.states import JobState
from ._redis.connection import Connection, connect
from ._redis.replies import ExtendResult
from ._worker.worker import Worker
from .app import Job, Queue, TaskHandle, current_job
from .cancel import CancelToken
from .config import ConnectionConfig, parse_url
from .errors import (
    EchoMQError,
    JobCancelled,
    JobFailed,
    Retry,
)

__version__ = "0.1.0"

__all__ = [
    "CancelToken",
    "Claimed",
    "Connection",
    "ConnectionConfig",
    "EchoMQError",
    "ExtendResult",
    "Job",
    "JobCancelled",
    "JobFailed",
    "JobInfo",
    "JobState",
    "Queue",
    "Retry",
    "Sweep",
    "TaskHandle",
    "Worker",
    "__version__",
    "admin",
    "cancel",
    "connect",
    "current_job",
    "errors",
    "jobs",
    "parse_url",
    "stalled",
]
