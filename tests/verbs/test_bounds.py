"""Every script that does work proportional to an argument refuses a value over its cap
itself (EMQARG -> InvalidArgument) before its first write, even when a caller skips the
verb's own gate; at the cap, it works (docs/lua.md, rule 8: bounded work per call)."""

from __future__ import annotations

from typing import Any

import pytest
import trio

import echomq
from echomq import jobs, stalled
from echomq._scripts import validate as v
from echomq._scripts.calls import ScriptCall, evaluate
from echomq._scripts.keyspace import Keyspace
from echomq.errors import InvalidArgument
from echomq.jobs import lifecycle as life

from ._support import lapse, snapshot


def tampered(sc: ScriptCall[Any], argv: list[Any]) -> ScriptCall[Any]:
    """``sc`` with other arguments: what a caller that bypassed the verb's gate would send."""
    return ScriptCall(sc.script, sc.keys, argv, sc.read)


async def refused(conn: echomq.Connection, ks: Keyspace, sc: ScriptCall[Any]) -> None:
    before = await snapshot(conn, ks)
    with pytest.raises(InvalidArgument):
        await evaluate(conn, sc)
    assert await snapshot(conn, ks) == before


async def test_enqueue_script_refuses_more_jobs_than_its_cap(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """MAX_ENQUEUE jobs enqueue in one call; one more (or a count that lies) writes nothing."""
    ids = await jobs.enqueue_many(conn, queue, [jobs.NewJob(payload=b"x")] * v.MAX_ENQUEUE)
    assert len(ids) == v.MAX_ENQUEUE
    sc = life.enqueue_call(queue, [jobs.NewJob(payload=b"x")] * v.MAX_ENQUEUE)
    argv = list(sc.argv)
    over = [argv[0], v.MAX_ENQUEUE + 1, *argv[2:], "one-more", b"x", "1"]
    await refused(conn, ks, tampered(sc, over))
    await refused(conn, ks, tampered(sc, [argv[0], v.MAX_ENQUEUE - 1, *argv[2:]]))


async def test_batch_scripts_refuse_more_pairs_than_their_cap(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """extend_locks and release take MAX_HELD pairs; one more is refused by the script."""
    await jobs.enqueue_many(conn, queue, [jobs.NewJob(payload=b"x")] * v.MAX_ENQUEUE)
    held = [(c.id, c.token) for c in await jobs.claim(conn, queue, 60_000, count=v.MAX_HELD)]
    assert len(held) == v.MAX_HELD
    answers = await jobs.extend_locks(conn, queue, held, 60_000)
    assert set(answers.values()) == {"ok"}
    extra = ["someone", "1"]
    sc = life.extend_locks_call(queue, held, 60_000)
    await refused(conn, ks, tampered(sc, [*sc.argv, *extra]))
    sc = life.release_call(queue, held)
    await refused(conn, ks, tampered(sc, [*sc.argv, *extra]))
    released = await jobs.release(conn, queue, held)
    assert set(released.values()) == {"ok"}


async def test_claim_and_sweeps_refuse_counts_over_their_caps(
    conn: echomq.Connection, queue: str, ks: Keyspace
) -> None:
    """claim count, reap and stalled-sweep limits over the caps are refused by the scripts."""
    await jobs.enqueue_many(conn, queue, [jobs.NewJob(payload=b"x")] * 3)
    sc = life.claim_call(queue, 10, 1)
    await refused(conn, ks, tampered(sc, [sc.argv[0], sc.argv[1], v.MAX_COUNT + 1]))
    claimed = await jobs.claim(conn, queue, 10, count=3)
    with trio.fail_after(5):
        await lapse(conn, ks, *[c.id for c in claimed])
    sc = life.reap_call(queue, limit=1)
    await refused(conn, ks, tampered(sc, [sc.argv[0], v.MAX_BATCH + 1, *sc.argv[2:]]))
    sc = stalled.check_call(queue, limit=1)
    await refused(conn, ks, tampered(sc, [sc.argv[0], v.MAX_BATCH + 1, *sc.argv[2:]]))
    assert sorted(await jobs.reap(conn, queue, limit=v.MAX_BATCH)) == sorted(c.id for c in claimed)
