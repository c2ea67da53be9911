"""The wake list: idle consumers block on it instead of polling.

Everything that makes work claimable pushes a token on ``emq:{q}:wake`` (the scripts keep
the list short). An idle consumer BLPOPs it on a connection of its own, with a timeout no
later than the next scheduled job's due time (so the claim promotes it in time) and
never longer than the cap.
"""

from __future__ import annotations

from .._redis.connection import Connection
from .._redis.keyspace import Keyspace
from ..errors import InvalidArgument

__all__ = ["push_wake", "wait_wake"]

_MIN_BLOCK = 0.01  # BLPOP's 0 means "forever": never send it
_MAX_TOKENS = 64  # the scripts' bound on the list, kept here too


async def wait_wake(conn: Connection, queue: str, block: float) -> bool:
    """Block up to ``block`` seconds for a wake token; True when one was taken.

    Use a connection of its own: BLPOP holds the connection while it waits.

    Raises:
        InvalidArgument: ``block`` is not a positive number (before any I/O).
    """
    if not isinstance(block, int | float) or isinstance(block, bool) or not block > 0:
        raise InvalidArgument(f"block must be a positive number of seconds, not {block!r}")
    seconds = max(_MIN_BLOCK, round(float(block), 3))
    return await conn.execute("BLPOP", Keyspace(queue).wake, seconds) is not None


async def push_wake(conn: Connection, queue: str) -> None:
    """Push one wake token (the list stays at most 64 long).

    For work the scripts do not announce on the list: a job scheduled (or retried with a
    delay) while consumers block, whose due time may come before their timeout.
    """
    wake = Keyspace(queue).wake
    await conn.execute("RPUSH", wake, 1)
    await conn.execute("LTRIM", wake, -_MAX_TOKENS, -1)
