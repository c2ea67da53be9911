"""The native twin: every transition run through EVALSHA and through FCALL gives the same
replies and leaves the same keyspace (DESIGN.md section 6).

What this proves, plainly: the differential test (``test_evalsha_and_fcall_agree``) runs the
same Lua twice, so it proves the Functions wrapping changes nothing, not that the Lua is
right. The checks below are independent of the Lua: both executors are run through every
verb and each observed state change is checked against ``TRANSITIONS`` (a table written
by hand), and for enqueue, claim and complete the whole keyspace is written out by hand.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any, cast

import pytest
import trio

import echomq
from _transitions import check_against_transitions, listed_moves, run_every_verb
from _waits import clock_moves
from echomq import admin, cancel, jobs, stalled
from echomq._model.job import Claimed
from echomq._scripts.calls import SCHEMA_VERSION
from echomq._scripts.functions import FunctionsConnection, library_source, load_library
from echomq._scripts.keyspace import Keyspace

# Fields and sets whose values are server-clock times: compared by presence and order only;
# the lease epoch too (the run id of the queue's master, checked by hand below: on a
# cluster the two queues compared may live on different masters)
TIME_FIELDS = {
    b"created_at",
    b"claimed_at",
    b"finished_at",
    b"run_at",
    b"cancel_requested",
    b"lease_epoch",
}
TIME_SETS = ("active", "schedule", "dead", "completed", "cancelled")


async def scenario(conn: echomq.Connection, q: str) -> list[tuple[str, Any]]:
    """Every lifecycle transition and refusal, with fixed ids; answers what each step said."""
    log: list[tuple[str, Any]] = []

    async def step(name: str, action: Callable[[], Awaitable[Any]]) -> None:
        try:
            log.append((name, await action()))
        except echomq.errors.ServerError as exc:  # unexpected: keep the text for the diff
            log.append((name, f"ServerError: {exc}"))
        except echomq.EchoMQError as exc:
            log.append((name, type(exc).__name__))

    await step("enqueue a", lambda: jobs.enqueue(conn, q, b"A", job_id="a", max_attempts=2))
    await step("enqueue b", lambda: jobs.enqueue(conn, q, b"B", job_id="b"))
    await step("enqueue c", lambda: jobs.enqueue(conn, q, b"C", job_id="c", priority=5))
    await step("enqueue d", lambda: jobs.enqueue(conn, q, b"D", job_id="d", delay_ms=1))
    await step("duplicate", lambda: jobs.enqueue(conn, q, b"X", job_id="a"))
    await step(
        "bulk",
        lambda: jobs.enqueue_many(
            conn, q, [jobs.NewJob(payload=b"E", job_id="e"), jobs.NewJob(payload=b"F", job_id="f")]
        ),
    )
    await clock_moves(conn, 2)  # the 1 ms delay / lease is behind the server clock
    await step("claim 3", lambda: jobs.claim(conn, q, 10_000, count=3))
    await step("extend stale", lambda: jobs.extend_lock(conn, q, "a", 7, 5_000))
    await step("extend gone", lambda: jobs.extend_lock(conn, q, "zz", 1, 5_000))
    await step("extend ok", lambda: jobs.extend_lock(conn, q, "a", 1, 5_000))
    await step(
        "extend batch",
        lambda: jobs.extend_locks(conn, q, [("a", 1), ("c", 2), ("zz", 1), ("e", 1)], 5_000),
    )
    await step("fail a", lambda: jobs.fail(conn, q, "a", 1, "boom", retry_delay_ms=0))
    await step("complete c", lambda: jobs.complete(conn, q, "c", 1, b"done"))
    await step("complete c again", lambda: jobs.complete(conn, q, "c", 1, b"done"))
    await step("complete c stale", lambda: jobs.complete(conn, q, "c", 9, b"done"))
    await step("complete a not active", lambda: jobs.complete(conn, q, "a", 1, b"x"))
    await step("claim rest", lambda: jobs.claim(conn, q, 1, count=10))
    await clock_moves(conn, 2)  # the 1 ms delay / lease is behind the server clock
    await step("reap", lambda: jobs.reap(conn, q))
    await step("claim again", lambda: jobs.claim(conn, q, 1, count=2))
    await clock_moves(conn, 2)  # the 1 ms delay / lease is behind the server clock
    await step("sweep", lambda: stalled.check(conn, q, max_stalled=1))
    await step("claim last", lambda: jobs.claim(conn, q, 10_000, count=10))
    await step("release", lambda: jobs.release(conn, q, [("b", 3), ("e", 1), ("zz", 1)]))
    await step("fail dead", lambda: jobs.fail(conn, q, "f", 2, "bad", dead=True))
    for job_id in "abcdef":
        await step(f"row {job_id}", lambda job_id=job_id: jobs.get_job(conn, q, job_id))
    await operator_steps(conn, q, step)
    await cancel_steps(conn, q, step)
    return log


async def operator_steps(
    conn: echomq.Connection, q: str, step: Callable[[str, Callable[[], Awaitable[Any]]], Any]
) -> None:
    """The operator plane's verbs (docs/operations.md), each through its success and
    refusal branches."""
    await step("pause", lambda: admin.pause(conn, q))
    await step("pause again", lambda: admin.pause(conn, q))
    await step("paused?", lambda: admin.is_paused(conn, q))
    await step("claim paused", lambda: jobs.claim(conn, q, 1_000))
    await step("reprocess f", lambda: jobs.reprocess_job(conn, q, "f"))
    await step("reprocess f again", lambda: jobs.reprocess_job(conn, q, "f"))
    await step("reprocess gone", lambda: jobs.reprocess_job(conn, q, "zz"))
    await step("data", lambda: jobs.update_data(conn, q, "f", b"F2"))
    await step("data gone", lambda: jobs.update_data(conn, q, "zz", b"x"))
    await step("progress", lambda: jobs.update_progress(conn, q, "f", "40"))
    await step("progress gone", lambda: jobs.update_progress(conn, q, "zz", "1"))
    await step("log 1", lambda: jobs.add_log(conn, q, "f", "one"))
    await step("log 2", lambda: jobs.add_log(conn, q, "f", "two"))
    await step("log keep", lambda: jobs.add_log(conn, q, "f", "three", keep=2))
    await step("logs", lambda: jobs.get_job_logs(conn, q, "f"))
    await step("logs none", lambda: jobs.get_job_logs(conn, q, "c"))
    await step("logs gone", lambda: jobs.get_job_logs(conn, q, "zz"))
    await step("lock a", lambda: conn.execute("SET", f"emq:{{{q}}}:job:a:lock", "op"))
    await step("remove locked", lambda: jobs.remove_job(conn, q, "a"))
    await step("remove d", lambda: jobs.remove_job(conn, q, "d"))
    await step("remove gone", lambda: jobs.remove_job(conn, q, "d"))
    await step("obliterate active", lambda: admin.obliterate(conn, q))
    await step("drain", lambda: admin.drain(conn, q, include_schedule=True))
    await step("resume", lambda: admin.resume(conn, q))
    await step("obliterate running", lambda: admin.obliterate(conn, q, force=True))
    await step("pause for the end", lambda: admin.pause(conn, q))
    await step("obliterate forced", lambda: admin.obliterate(conn, q, force=True, budget=2))


async def cancel_steps(
    conn: echomq.Connection, q: str, step: Callable[[str, Callable[[], Awaitable[Any]]], Any]
) -> None:
    """Cancel as one script through each branch, extend_locks' cancel answer, the
    paged drain, and resume of a running queue (on the obliterated queue: empty, running)."""

    async def extend_both() -> Any:
        answers = await jobs.extend_locks(conn, q, [("i", 1), ("j", 1), ("zz", 1)], 5_000)
        return dict(answers), answers.cancel_reasons

    await step("obliterate the rest", lambda: admin.obliterate_all(conn, q, force=True))
    await step("enqueue g", lambda: jobs.enqueue(conn, q, b"G", job_id="g"))
    await step("enqueue h", lambda: jobs.enqueue(conn, q, b"H", job_id="h", delay_ms=60_000))
    await step("cancel pending", lambda: cancel.request(conn, q, "g"))
    await step("cancel scheduled", lambda: cancel.request(conn, q, "h", "later"))
    await step("enqueue i j", lambda: jobs.enqueue_many(
        conn, q, [jobs.NewJob(payload=b"I", job_id="i"), jobs.NewJob(payload=b"J", job_id="j")]
    ))  # fmt: skip
    await step("claim i j", lambda: jobs.claim(conn, q, 10_000, count=2))
    await step("cancel active", lambda: cancel.request(conn, q, "i", "stop"))
    await step("cancel active again", lambda: cancel.request(conn, q, "i", "again"))
    await step("cancel active no reason", lambda: cancel.request(conn, q, "j"))
    await step("extend flagged", extend_both)
    await step("complete j", lambda: jobs.complete(conn, q, "j", 1, b"cancelled:"))
    await step("cancel completed", lambda: cancel.request(conn, q, "j"))
    await step("cancel gone", lambda: cancel.request(conn, q, "zz"))
    await step("enqueue k", lambda: jobs.enqueue(conn, q, b"K", job_id="k"))
    await step("lock k", lambda: conn.execute("SET", f"emq:{{{q}}}:job:k:lock", "op"))
    await step("cancel locked", lambda: cancel.request(conn, q, "k"))
    await step(
        "enqueue l m",
        lambda: jobs.enqueue_many(
            conn, q, [jobs.NewJob(payload=b"L", job_id="l"), jobs.NewJob(payload=b"M", job_id="m")]
        ),
    )
    await step("drain step", lambda: admin.drain_step(conn, q, budget=2))
    await step("drain rest", lambda: admin.drain(conn, q, budget=2))
    await step("resume running", lambda: admin.resume(conn, q))


async def dump(conn: echomq.Connection, q: str) -> dict[str, Any]:
    """The queue's keyspace, with the queue name and server-clock times taken out."""
    out: dict[str, Any] = {}
    cursor = b"0"
    keys: list[bytes] = []
    while True:
        cursor, batch = await conn.execute("SCAN", cursor, "MATCH", f"emq:{{{q}}}:*")
        keys += batch
        if cursor == b"0":
            break
    for key in keys:
        # a per-minute counter's name carries the server's minute: compared by outcome
        name = re.sub(
            r"(:metrics:\w+:)\d+$", r"\1<minute>", key.decode().replace(f"{{{q}}}", "{Q}")
        )
        kind = await conn.execute("TYPE", key)
        if kind == b"hash":
            flat = await conn.execute("HGETALL", key)
            row = dict(zip(flat[::2], flat[1::2], strict=True))
            out[name] = {k: (k in TIME_FIELDS) or v for k, v in row.items()}
        elif kind == b"zset":
            flat = await conn.execute("ZRANGE", key, 0, -1, "WITHSCORES")
            if name.endswith(TIME_SETS):
                out[name] = flat[::2]
            else:
                out[name] = flat
        elif kind == b"list":
            out[name] = await conn.execute("LRANGE", key, 0, -1)
        elif kind == b"stream":  # the entries' fields; their ids and times by presence
            entries = await conn.execute("XRANGE", key, "-", "+")
            out[name] = [
                [v if i % 2 == 0 or f[i - 1] not in TIME_FIELDS else True for i, v in enumerate(f)]
                for _, f in entries
            ]
        else:
            out[name] = await conn.execute("GET", key)
    return out


def normalise(log: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Job rows carry times, and a claimed job the ms it waited; keep everything else."""
    result = []
    for name, value in log:
        if isinstance(value, echomq.JobInfo):
            value = (value.state, value.token, value.failures, value.stalled, value.last_error)
        elif isinstance(value, list) and value and all(isinstance(c, Claimed) for c in value):
            value = [c._replace(waited_ms=0) for c in value]
        result.append((name, value))
    return result


async def test_library_holds_every_script() -> None:
    """The library registers one function per Lua file, named emq_<script>."""
    source = library_source()
    for name in echomq._scripts.calls.SCRIPTS:
        assert f"'emq_{name}'" in source


@pytest.mark.both_backends
async def test_evalsha_and_fcall_agree(conn: echomq.Connection, queue: str) -> None:
    """The same transitions through EVALSHA and FCALL: same replies, same keyspace."""
    await load_library(conn)
    native = cast(echomq.Connection, FunctionsConnection(conn))
    with trio.fail_after(10):
        scripted = await scenario(conn, queue + "-s")
        twin = await scenario(native, queue + "-n")
        assert normalise(scripted) == normalise(twin)
        assert await dump(conn, queue + "-s") == await dump(conn, queue + "-n")
    steps = dict(normalise(scripted))
    assert steps["duplicate"] == "DuplicateJob"
    assert steps["extend stale"] == "StaleToken"
    assert steps["complete c again"] is None
    assert steps["fail a"] == "retrying"
    assert steps["remove locked"] == "JobLocked"
    assert steps["reprocess f again"] == "NotDead"
    assert steps["obliterate active"] == "ActiveJobs"
    assert steps["obliterate running"] == "NotPaused"
    assert steps["cancel pending"] == "removed" and steps["cancel scheduled"] == "removed"
    assert steps["cancel active"] == steps["cancel active again"] == "signalled"
    assert steps["extend flagged"] == (
        {"i": "cancel", "j": "cancel", "zz": "gone"},
        {"i": "stop", "j": None},
    )
    assert steps["cancel completed"] == "NotCancellable"
    assert steps["cancel gone"] == "JobGone"
    assert steps["cancel locked"] == "JobLocked"
    assert steps["drain step"] == admin.DrainStep(deleted=2, remaining=1)
    assert not any(str(value).startswith("ServerError") for _, value in scripted)


# -- checks that do not compare the Lua with itself --------------------------------------


async def test_both_executors_make_only_the_moves_in_the_table(
    conn: echomq.Connection, queue: str
) -> None:
    """Every verb through EVALSHA and through FCALL: each observed state change is a row of
    TRANSITIONS (an independent table), and every row is made by both."""
    await load_library(conn)
    native = FunctionsConnection(conn)
    with trio.fail_after(30):
        for executor, name in ((conn, queue + "-s"), (native, queue + "-n")):
            steps = await run_every_verb(executor, name)
            seen = check_against_transitions(steps)
            assert seen == listed_moves(), f"{type(executor).__name__}: {seen}"


def _expected_after_enqueue() -> dict[str, Any]:
    return {
        "emq:{Q}:job:a": {
            b"state": b"pending", b"payload": b"A", b"token": b"0",
            b"priority": b"2", b"max_attempts": b"3", b"created_at": True,
        },
        "emq:{Q}:pending": [b"a", str(-2 * 2**40 + 1).encode()],
        "emq:{Q}:meta": {
            b"seq": b"1", b"schema_version": str(SCHEMA_VERSION).encode(), b"logs": b"0",
        },
        "emq:{Q}:wake": [b"1"],
    }  # fmt: skip


async def test_hand_written_keyspace_after_enqueue_claim_complete(
    conn: echomq.Connection, queue: str
) -> None:
    """For a few transitions the whole keyspace is written out by hand (docs/keyspace.md),
    not taken from a run: both executors must produce exactly it."""
    await load_library(conn)
    info = (await conn.execute("INFO", "server")).decode()
    run_id = next(x.split(":", 1)[1].strip() for x in info.splitlines() if x.startswith("run_id"))
    for executor, q in ((conn, queue + "-hs"), (FunctionsConnection(conn), queue + "-hn")):
        await jobs.enqueue(executor, q, b"A", job_id="a", priority=2, max_attempts=3)
        assert await dump(conn, q) == _expected_after_enqueue()
        [held] = await jobs.claim(executor, q, 60_000)
        claimed = _expected_after_enqueue()
        claimed["emq:{Q}:job:a"].update(
            {b"state": b"active", b"token": b"1", b"lease_epoch": True,
             b"claimed_at": True}
        )  # fmt: skip
        del claimed["emq:{Q}:pending"]  # an empty set is no key
        claimed["emq:{Q}:active"] = [b"a"]
        assert (held.id, held.token, held.payload) == ("a", 1, b"A")
        assert await dump(conn, q) == claimed
        epoch = await conn.execute("HGET", Keyspace(q).job("a"), "lease_epoch")
        assert epoch == run_id.encode()  # the server's run id (dump compares presence)
        await jobs.complete(executor, q, "a", 1, b"R")
        done = claimed
        done["emq:{Q}:job:a"].update(
            {b"state": b"completed", b"result": b"R", b"finished_at": True}
        )
        del done["emq:{Q}:job:a"][b"lease_epoch"]  # the lease's fields go at the finish
        del done["emq:{Q}:active"]
        done["emq:{Q}:completed"] = [b"a"]
        done["emq:{Q}:metrics:completed"] = {b"count": b"1"}
        done["emq:{Q}:metrics:completed:<minute>"] = {b"count": b"1"}
        done["emq:{Q}:completions"] = [
            [b"id", b"a", b"state", b"completed", b"token", b"1", b"result", b"R",
             b"failures", b"0", b"created_at", True, b"claimed_at", True, b"finished_at", True]
        ]  # fmt: skip
        assert await dump(conn, q) == done
