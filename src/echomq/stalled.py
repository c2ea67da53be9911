"""The count-thresholded stalled sweep (docs/runtime.md), beside the reaper.

One :func:`check` is one sweep: every expired lease leaves active; a lease from before
the server's last restart is recovered without counting; the rest count a stall and go
back to pending below ``max_stalled``, or to dead at it (``last_error = "stalled"``).
An active id with no row is only removed from active: listed nowhere, no row written.
With the default ``max_stalled=1`` the first counted stall dead-letters: the reaper
(``jobs.reap``) is the recover-once path, this sweep the give-up path.

This module is the public face; the implementation lives in ``echomq._verbs.stalled``.
"""

from __future__ import annotations

from ._model.job import Sweep
from ._verbs.stalled import DEFAULT_LIMIT, DEFAULT_MAX_STALLED, check, check_call

__all__ = ["DEFAULT_LIMIT", "DEFAULT_MAX_STALLED", "Sweep", "check", "check_call"]
