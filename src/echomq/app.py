"""What users import: Queue, @queue.task, Task, TaskHandle, and the Job context.

The classes live in ``queue.py`` (``Queue``), ``task.py`` (``Task``) and ``handle.py``
(``TaskHandle``); the ``Job`` context belongs to the runtime (``_worker/context.py``);
the options are values of ``_model/options.py``. This module gathers them under the names
users import (``echomq.app.Task``...).
"""

from __future__ import annotations

from ._model.cancel import MAX_REASON as MAX_REASON
from ._model.cancel import cancelled_reason as cancelled_reason
from ._model.cancel import cancelled_result as cancelled_result
from ._model.codec import JSON as JSON
from ._model.options import DEFAULT_LEASE as DEFAULT_LEASE
from ._model.options import EnqueueOptions as EnqueueOptions
from ._model.options import TaskOptions as TaskOptions
from ._model.options import to_ms as to_ms
from ._worker.context import Job as Job
from ._worker.context import current_job as current_job
from .handle import TaskHandle as TaskHandle
from .queue import Queue as Queue
from .task import Task as Task

__all__ = [
    "EnqueueOptions",
    "Job",
    "Queue",
    "Task",
    "TaskHandle",
    "TaskOptions",
    "current_job",
]
