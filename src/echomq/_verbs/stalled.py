"""The count-thresholded stalled sweep (docs/runtime.md), beside the reaper; ``echomq.stalled``
is its public face.

One :func:`check` is one sweep: every expired lease leaves active; a lease from before
the server's last restart is recovered without counting; the rest count a stall and go
back to pending below ``max_stalled``, or to dead at it (``last_error = "stalled"``).
An active id with no row is only removed from active: listed nowhere, no row written.
With the default ``max_stalled=1`` the first counted stall dead-letters: the reaper
(``jobs.reap``) is the recover-once path, this sweep the give-up path.
"""

from __future__ import annotations

from typing import Any

from .._model.job import Sweep
from .._redis import validate as v
from .._redis.keyspace import Keyspace
from .._redis.replies import text
from .._redis.scripts import Executor, ScriptCall, evaluate, script_call
from ..errors import ScriptError

__all__ = ["DEFAULT_LIMIT", "DEFAULT_MAX_STALLED", "Sweep", "check", "check_call"]

DEFAULT_MAX_STALLED = 1
DEFAULT_LIMIT = 100


def _read(reply: Any) -> Sweep:
    if not (
        isinstance(reply, list) and len(reply) == 2 and all(isinstance(x, list) for x in reply)
    ):
        raise ScriptError(f"stalled check: unexpected reply {reply!r}")
    return Sweep(recovered=[text(x) for x in reply[0]], dead=[text(x) for x in reply[1]])


def check_call(
    queue: str, *, max_stalled: int = DEFAULT_MAX_STALLED, limit: int = DEFAULT_LIMIT
) -> ScriptCall[Sweep]:
    ks = Keyspace(queue)
    argv = [
        ks.base,
        v.positive_int("max_stalled", max_stalled),
        v.positive_int("limit", limit, v.MAX_BATCH),
    ]
    keys = [ks.active, ks.pending, ks.wake]
    return script_call("stalled_check", keys, argv, _read)


async def check(
    conn: Executor,
    queue: str,
    *,
    max_stalled: int = DEFAULT_MAX_STALLED,
    limit: int = DEFAULT_LIMIT,
) -> Sweep:
    """Run one stalled sweep over at most ``limit`` expired leases (server clock).

    Args:
        max_stalled: the counted stalls at which a job is dead-lettered (>= 1).
        limit: at most this many expired leases per call (1..100, ``MAX_BATCH``);
            call again for more.

    Raises:
        InvalidKey, InvalidArgument: before any I/O.
    """
    return await evaluate(conn, check_call(queue, max_stalled=max_stalled, limit=limit))
