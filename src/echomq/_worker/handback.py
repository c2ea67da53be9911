"""The jobs a worker still holds when it stops: back to pending, or left to recovery.

Rule 1 (a stop): the held-job table's hand-back list (jobs finished unsettled, prefetched
jobs never started, jobs claimed as the worker stops) goes back to pending at once with
fenced ``release`` calls (one queue and at most ``MAX_HELD`` jobs per call; no count,
first in their priority band). A job whose token moved on (taken over, fenced) is not released.
Rule 2 (a crash: an error leaves ``serve``): the started jobs are not handed back
uncounted; their leases are cut to 1 ms (one fenced ``extend_locks``), so the next sweep,
any worker's, collects them at once and counts the stall, as after a SIGKILL: a job that
takes its worker down is bounded by ``max_stalled``. Prefetched jobs never started, so
they are not what failed it: they are released uncounted, as at a stop.
Each call runs under a shield bounded by ``RELEASE_TIMEOUT``; a call that fails leaves the
jobs to their leases and recovery.
"""

from __future__ import annotations

import logging

import trio

from .. import jobs
from .._scripts import validate as v
from .._wire.interface import RedisConnection
from ..errors import TRANSIENT
from .cancellation import InFlight, Returned
from .claims import ClaimLoop
from .tally import Counters

__all__ = ["RELEASE_TIMEOUT", "abandon", "release", "serve_ended"]

log = logging.getLogger("echomq.worker")

RELEASE_TIMEOUT = 5.0


async def serve_ended(
    conn: RedisConnection,
    inflight: InFlight,
    claims: ClaimLoop,
    counters: Counters,
    crashed: bool,
) -> None:
    """``serve`` ends: rule 1, or rule 2 when it failed."""
    if not crashed:
        claims.give_back(unstarted=True)  # prefetched jobs: with the others
        await release(conn, inflight, counters)
        return
    started = inflight.take_hand_back()
    claims.give_back(unstarted=True)
    try:
        await release(conn, inflight, counters)
    except Exception as exc:  # failing already: their leases lapse instead
        log.error("worker failed: could not hand back its prefetched jobs (%s)", exc)
    await abandon(conn, started)


def _by_queue(held: list[Returned]) -> dict[str, list[tuple[str, int]]]:
    """``(queue, id, token)`` triples as ``queue -> [(id, token)]`` (a call per queue)."""
    found: dict[str, list[tuple[str, int]]] = {}
    for queue, job_id, token in held:
        found.setdefault(queue, []).append((job_id, token))
    return found


async def release(conn: RedisConnection, inflight: InFlight, counters: Counters) -> None:
    """Rule 1: the hand-back list to pending at once (fenced; no count)."""
    pending = inflight.take_hand_back()
    if not pending:
        return
    with trio.CancelScope(shield=True), trio.move_on_after(RELEASE_TIMEOUT):
        try:
            answers: list[str] = []
            for queue, pairs in _by_queue(pending).items():
                for start in range(0, len(pairs), v.MAX_HELD):  # the verb's cap per call
                    chunk = pairs[start : start + v.MAX_HELD]
                    answers += (await jobs.release(conn, queue, chunk)).values()
        except TRANSIENT as exc:
            log.error(
                "shutdown: could not hand back %d job(s) (%s); recovery will return them",
                len(pending),
                exc,
            )
            return
        released = [answer for answer in answers if answer == "ok"]
        counters.released += len(released)
        log.info("shutdown: handed %d job(s) back to pending", len(released))


async def abandon(conn: RedisConnection, held: list[Returned]) -> None:
    """Rule 2: leave ``held`` to recovery as crashed (counted as stalls)."""
    if not held:
        return
    with trio.CancelScope(shield=True), trio.move_on_after(RELEASE_TIMEOUT):
        try:
            for queue, pairs in _by_queue(held).items():
                await jobs.extend_locks(conn, queue, pairs, 1)
        except Exception as exc:  # the worker is failing already; recovery still runs
            log.error(
                "worker failed: could not cut the leases of %d job(s) (%s); they return "
                "when their leases lapse",
                len(held),
                exc,
            )
            return
    log.error("worker failed holding %d job(s): left to recovery as stalled (counted)", len(held))
