"""Wait until a job is running: its row is ``active`` (a worker holds its lease).

There is no event for a claim, so the row is read every ``poll`` seconds; bound the wait
with ``trio.fail_after`` as every wait in a test.
"""

from __future__ import annotations

from typing import Any

import trio

from .._model.job import JobInfo
from .._model.states import JobState
from ..app import TaskHandle
from ..errors import InvalidArgument

__all__ = ["wait_running"]


async def wait_running(
    handle: TaskHandle[Any], *, attempt: int | None = None, poll: float = 0.01
) -> JobInfo:
    """Wait until ``handle``'s job is active; answer its row.

    Args:
        attempt: wait for that claim: the row's fencing token (``token``) at least this
            (2: the job was taken over once, after a crash or a lapsed lease).
        poll: seconds between two reads of the row.

    Raises:
        InvalidArgument: ``attempt`` not a positive int, ``poll`` not positive.
    """
    if attempt is not None and (
        isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1
    ):
        raise InvalidArgument(f"attempt must be a positive int, not {attempt!r}")
    if isinstance(poll, bool) or not isinstance(poll, int | float) or not poll > 0:
        raise InvalidArgument(f"poll must be a positive number of seconds, not {poll!r}")
    while True:
        info = await handle.info()
        if (
            info is not None
            and info.state is JobState.ACTIVE
            and (attempt is None or info.token >= attempt)
        ):
            return info
        await trio.sleep(poll)
