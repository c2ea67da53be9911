"""The count-thresholded stalled sweep (docs/runtime.md), beside the reaper,
and the recovery guard that lets one worker sweep a queue per interval.

One :func:`check` is one sweep: every expired lease leaves active; a lease from before
the server's last restart is recovered without counting; the rest count a stall and go
back to pending below ``max_stalled``, or to dead at it (``last_error = "stalled"``).
An active id with no row is only removed from active: listed nowhere, no row written.
With the default ``max_stalled=1`` the first counted stall dead-letters: the reaper
(``jobs.reap``) is the recover-once path, this sweep the give-up path.

``take_sweep_guard`` is ``SET sweep_guard owner NX PX interval``: the first worker to ask
in an interval wins it and runs the reap (or the stalled sweep); the others skip that
tick. The key expires by itself, so a worker that dies holding it blocks nobody for
longer than one interval.
"""

from __future__ import annotations

from typing import Any

from ._model.job import Sweep
from ._scripts import validate as v
from ._scripts.calls import Executor, ScriptCall, evaluate, script_call
from ._scripts.keyspace import Keyspace
from ._scripts.replies import text
from .errors import ScriptError

__all__ = [
    "DEFAULT_LIMIT",
    "DEFAULT_MAX_STALLED",
    "Sweep",
    "check",
    "check_call",
    "take_sweep_guard",
]

DEFAULT_MAX_STALLED = 1
DEFAULT_LIMIT = v.MAX_BATCH


def _read(reply: Any) -> Sweep:
    if not (
        isinstance(reply, list) and len(reply) == 2 and all(isinstance(x, list) for x in reply)
    ):
        raise ScriptError(f"stalled check: unexpected reply {reply!r}")
    return Sweep(recovered=[text(x) for x in reply[0]], dead=[text(x) for x in reply[1]])


def check_call(
    queue: str, *, limit: int = DEFAULT_LIMIT, max_stalled: int = DEFAULT_MAX_STALLED
) -> ScriptCall[Sweep]:
    """``stalled_check.lua``: the keys and argv in ``jobs.reap_call``'s order (active,
    pending, wake; the base, the limit, then the stall bound)."""
    ks = Keyspace(queue)
    argv = [
        ks.base,
        v.positive_int("limit", limit, v.MAX_BATCH),
        v.positive_int("max_stalled", max_stalled),
    ]
    keys = [ks.active, ks.pending, ks.wake]
    return script_call("stalled_check", keys, argv, _read)


async def check(
    conn: Executor,
    queue: str,
    *,
    limit: int = DEFAULT_LIMIT,
    max_stalled: int = DEFAULT_MAX_STALLED,
) -> Sweep:
    """Run one stalled sweep over at most ``limit`` expired leases (server clock).

    Args:
        limit: at most this many expired leases per call (1..``MAX_BATCH``); call again
            for more.
        max_stalled: the counted stalls at which a job is dead-lettered (>= 1).

    Raises:
        InvalidKey, InvalidArgument: before any I/O.
    """
    return await evaluate(conn, check_call(queue, limit=limit, max_stalled=max_stalled))


async def take_sweep_guard(conn: Executor, queue: str, owner: str, ttl_ms: int) -> bool:
    """Try to take the queue's sweep guard for ``ttl_ms``; True when this caller won it.

    Raises:
        InvalidKey, InvalidArgument: before any I/O.
    """
    key = Keyspace(queue).sweep_guard
    v.positive_int("ttl_ms", ttl_ms)
    v.text_arg("owner", owner)
    reply = await conn.execute("SET", key, owner, "NX", "PX", ttl_ms)
    return reply is not None
