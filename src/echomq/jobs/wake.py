"""The wake list: idle consumers block on it instead of polling.

Everything that makes work claimable pushes a token on ``emq:{q}:wake`` (the scripts keep
the list short). An idle consumer blocks on it with :func:`wait_then_claim`, on a
connection of its own: ``BLPOP`` and the claim script go out in one write, so the server
runs the claim the moment a token (or the timeout) unblocks the ``BLPOP``, with no round
trip between them. The timeout is no later than the next scheduled job's due time (so the
claim promotes it in time).

Each consumer also blocks on a list of its own (``emq:{q}:wake:<consumer>``): a token
there (:func:`nudge`) wakes that consumer alone, to stop it, or because a job it knows of
is due sooner than its timeout.
"""

from __future__ import annotations

from .._scripts.calls import evaluate_reply, is_sharded
from .._scripts.keyspace import Keyspace
from .._wire.interface import RedisConnection
from ..errors import InvalidArgument, ServerError
from .lifecycle import ClaimBatch, claim_batch_call

__all__ = ["nudge", "wait_for_work", "wait_then_claim"]

_MIN_BLOCK = 0.01  # BLPOP's 0 means "forever": never send it
_NUDGE_TTL_MS = 10_000  # a nudge nobody took does not linger


async def wait_then_claim(
    wake_conn: RedisConnection,
    conn: RedisConnection,
    queue: str,
    consumer: str,
    block: float,
    lease_ms: int,
    count: int,
    worker: str | None = None,
) -> ClaimBatch:
    """Block up to ``block`` seconds for a wake token, then claim up to ``count`` jobs.

    ``wake_conn`` must be a connection of its own (BLPOP holds it). The claim runs on the
    server whatever unblocks the BLPOP (a token, a nudge, the timeout): the caller must
    take its reply, so do not cancel this call (shield it); to end it early, :func:`nudge`.
    ``conn`` runs the claim again only if the server did not know the script (NOSCRIPT).
    ``worker``: the claiming worker's id, written on the claimed rows (``jobs.claim_batch``).

    Raises:
        InvalidArgument: ``block`` is not a positive number (before any I/O).
        ConnectionLost: the reply was lost: the claim may have run; its jobs' leases lapse
            and recovery returns them.
    """
    if not isinstance(block, int | float) or isinstance(block, bool) or not block > 0:
        raise InvalidArgument(f"block must be a positive number of seconds, not {block!r}")
    ks = Keyspace(queue)
    sc = claim_batch_call(queue, lease_ms, count, worker)
    seconds = max(_MIN_BLOCK, round(float(block), 3))
    popped, reply = await wake_conn.execute_pipeline(
        [("BLPOP", ks.wake, ks.wake_direct(consumer), seconds), sc.evalsha_args(is_sharded(conn))]
    )
    batch = await evaluate_reply(conn, sc, reply)  # the claim first: its jobs must be taken
    if isinstance(popped, ServerError) and not batch.jobs:
        raise popped  # (with jobs in hand, they are answered; the next wait raises it)
    return batch


async def wait_for_work(
    wake_conn: RedisConnection, queue: str, consumer: str, block: float
) -> bool:
    """Block up to ``block`` seconds for a wake token of ``queue`` (or a :func:`nudge` of
    ``consumer``), claiming nothing: a worker serving several queues waits on one while
    it claims from the others. True: a token of the queue's (there may be work).

    ``wake_conn`` must be a connection of its own (BLPOP holds it).

    Raises:
        InvalidArgument: ``block`` is not a positive number (before any I/O).
    """
    if not isinstance(block, int | float) or isinstance(block, bool) or not block > 0:
        raise InvalidArgument(f"block must be a positive number of seconds, not {block!r}")
    ks = Keyspace(queue)
    seconds = max(_MIN_BLOCK, round(float(block), 3))
    popped = await wake_conn.execute("BLPOP", ks.wake, ks.wake_direct(consumer), seconds)
    if not popped:
        return False
    key = popped[0]
    return (key.decode() if isinstance(key, bytes) else key) == ks.wake


async def nudge(conn: RedisConnection, queue: str, consumer: str) -> None:
    """Wake one consumer blocked in :func:`wait_then_claim` (and no other)."""
    key = Keyspace(queue).wake_direct(consumer)
    replies = await conn.execute_pipeline([("RPUSH", key, 1), ("PEXPIRE", key, _NUDGE_TTL_MS)])
    for reply in replies:
        if isinstance(reply, ServerError):
            raise reply
