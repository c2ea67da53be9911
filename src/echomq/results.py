"""Waiting for a job's outcome: its row, then the queue's completions stream (docs/results.md).

``ResultFeed(url, queue)`` is one reader of a queue's stream shared by every waiter
(``TaskHandle.result()`` uses the queue's); ``feed.wait(conn, job_id)`` answers an
:class:`Outcome` (``completed`` with ``result``, ``dead`` with ``error``, ``cancelled`` with
``reason``), or None when the job has no row (past its retention, or removed). The blocking
producer waits the same way: ``echomq.sync.SyncConnection.wait_outcome``.

This module is the public face; the implementation lives in ``echomq._verbs.results``.
"""

from __future__ import annotations

from ._model.completion import FinishState
from ._verbs.result_reads import Outcome
from ._verbs.results import GONE_CHECK, ResultFeed, ResultStatistics

__all__ = ["GONE_CHECK", "FinishState", "Outcome", "ResultFeed", "ResultStatistics"]
