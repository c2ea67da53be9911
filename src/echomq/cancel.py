"""Cancellation (docs/runtime.md): the worker-side token and the request verbs.

- :class:`CancelToken`: a flag a handler reads (``poll``/``check``); the worker bridges it
  to the job's ``trio.CancelScope``. A plain value (``_model/cancel.py``).
- :func:`request`: reach a job by queue and id from anywhere, in one script: a waiting job
  is removed, an active one is signalled (an event and a flag on its row, which the
  worker's lease keeper reads at its next renewal); with ``grace=``, the attempt is
  fenced when the grace runs out (:func:`fence_due`, run by every worker's heartbeat).
  See ``_verbs/cancel.py``.

This module is the public face; the implementations live in ``echomq._model.cancel`` and
``echomq._verbs.cancel``.
"""

from __future__ import annotations

from ._model.cancel import CancelToken
from ._verbs.cancel import (
    DEFAULT_FENCE_LIMIT,
    CancelOutcome,
    fence_due,
    fence_due_call,
    request,
    request_call,
)

__all__ = [
    "DEFAULT_FENCE_LIMIT",
    "CancelOutcome",
    "CancelToken",
    "fence_due",
    "fence_due_call",
    "request",
    "request_call",
]
