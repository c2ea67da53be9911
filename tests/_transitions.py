"""Run every verb and watch the job states it changes (``from _transitions import``).

:func:`run_every_verb` drives one queue through every state change the verbs can make,
recording, per step, which scripts ran (an executor that notes each ``EVALSHA``) and how
each job's ``state`` field moved (read before and after the step). The tests check every
observed move against ``echomq._model.states.TRANSITIONS``, and that every move the table
lists was seen: the table drives a real run, it does not only document one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs

import echomq
from _waits import clock_past, due
from echomq import admin, cancel, jobs, stalled
from echomq._model.states import TRANSITIONS, JobState
from echomq._redis.keyspace import Keyspace
from echomq._redis.scripts import SCRIPTS

BY_SHA = {s.variant(bool(v)).sha: name for name, s in SCRIPTS.items() for v in (0, 1)}
BY_SOURCE = {s.variant(bool(v)).source: name for name, s in SCRIPTS.items() for v in (0, 1)}
State = JobState | None
Move = tuple[State, State]


class Recorder:
    """An executor that runs commands on ``conn`` and notes the scripts it ran."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.sharded_pubsub = getattr(conn, "sharded_pubsub", False)
        self.ran: list[str] = []

    async def execute(self, *args: Any) -> Any:
        if args and args[0] == "EVALSHA":
            self.ran.append(BY_SHA[str(args[1])])
        elif args and args[0] == "EVAL":  # after NOSCRIPT: the source itself
            self.ran.append(BY_SOURCE[str(args[1])])
        return await self.conn.execute(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


@attrs.define
class Step:
    name: str
    scripts: tuple[str, ...]
    moves: dict[str, Move]  # job id -> (state before, state after), changed ones only


async def _states(conn: Any, queue: str, ids: Sequence[str]) -> dict[str, State]:
    ks = Keyspace(queue)
    out: dict[str, State] = {}
    for job_id in ids:
        raw = await conn.execute("HGET", ks.job(job_id), "state")
        out[job_id] = None if raw is None else JobState(raw.decode())
    return out


async def run_every_verb(conn: Any, queue: str) -> list[Step]:
    """Drive ``queue`` (empty) through every transition; answer what each step did."""
    rec = Recorder(conn)
    ids: list[str] = []
    steps: list[Step] = []

    async def step(name: str, action: Callable[[], Awaitable[Any]]) -> Any:
        before = await _states(conn, queue, ids)
        rec.ran = []
        answer = await action()
        after = await _states(conn, queue, ids)
        moves = {i: (before.get(i), after[i]) for i in ids if before.get(i) != after[i]}
        steps.append(Step(name, tuple(rec.ran), moves))
        return answer

    def new(job_id: str, **options: Any) -> Callable[[], Awaitable[str]]:
        ids.append(job_id)
        return lambda: jobs.enqueue(rec, queue, b"x", job_id=job_id, **options)

    async def claim(lease_ms: int = 60_000, count: int = 1) -> list[echomq.Claimed]:
        claimed: list[echomq.Claimed] = await step(
            f"claim {count}", lambda: jobs.claim(rec, queue, lease_ms, count=count)
        )
        return claimed

    async def lapse(held: Sequence[echomq.Claimed]) -> None:
        for c in held:
            score = await conn.execute("ZSCORE", Keyspace(queue).active, c.id)
            await clock_past(conn, float(score), Keyspace(queue).meta)

    for i in range(1, 15):
        await step(f"enqueue p{i}", new(f"p{i}", max_attempts=3))
    await step("enqueue s1", new("s1", delay_ms=1))
    await step("enqueue s2", new("s2", delay_ms=1))
    await step("enqueue s3", new("s3", delay_ms=600_000))
    await due(conn, queue, "s1", "s2")
    [one] = await claim()  # p1 taken; s1, s2 promoted
    await step("complete", lambda: jobs.complete(rec, queue, one.id, one.token, b"r"))
    [two] = await claim()
    # the count guards at 1 row: each finish past it deletes the row closest to its end
    await admin.set_retention(conn, queue, max_completed=1)
    await step(  # the completed row of p1 goes
        "complete, trim", lambda: jobs.complete(rec, queue, two.id, two.token, b"r")
    )
    pair = await claim(count=2)
    await step(  # the worker's batch: the completed row of p2 goes
        "complete many, trim",
        lambda: jobs.complete_many(rec, queue, [(c.id, c.token, b"r") for c in pair]),
    )
    [c] = await claim()
    await step(
        "fail later", lambda: jobs.fail(rec, queue, c.id, c.token, "e", retry_delay_ms=60_000)
    )
    [c] = await claim()
    await step("fail now", lambda: jobs.fail(rec, queue, c.id, c.token, "e"))
    [c] = await claim()
    await step("fail dead", lambda: jobs.fail(rec, queue, c.id, c.token, "e", dead=True))
    await admin.set_retention(conn, queue, max_dead=1)  # each dead-lettering drops the last
    held = await claim(lease_ms=1)
    await lapse(held)
    await step("reap", lambda: jobs.reap(rec, queue))
    held = await claim(lease_ms=1)
    await lapse(held)
    await step("reap counted", lambda: jobs.reap_counted(rec, queue, max_recoveries=0))
    held = await claim(lease_ms=1)
    await lapse(held)
    await step("sweep, below", lambda: stalled.check(rec, queue, max_stalled=5))
    held = await claim(lease_ms=1)
    await lapse(held)
    await step("sweep, at", lambda: stalled.check(rec, queue, max_stalled=1))
    [c] = await claim()
    await step("fail dead, trim", lambda: jobs.fail(rec, queue, c.id, c.token, "e", dead=True))
    [c] = await claim()
    await step("release", lambda: jobs.release(rec, queue, [(c.id, c.token)]))
    [dead_one] = await conn.execute("ZRANGE", Keyspace(queue).dead, 0, -1)
    await step("reprocess", lambda: jobs.reprocess_job(rec, queue, dead_one.decode()))
    await step("cancel scheduled", lambda: cancel.request(rec, queue, "s3"))
    [waiting] = [i for i, s in (await _states(conn, queue, ids)).items() if s is JobState.PENDING][
        :1
    ]
    await step("cancel pending", lambda: cancel.request(rec, queue, waiting))
    # cancel with a grace: fenced at once (grace 0), or by fence_cancels once it runs out,
    # whether the job is still active, or back in pending / the schedule by then
    for i in range(1, 5):
        await step(f"enqueue f{i}", new(f"f{i}", priority=100, max_attempts=3))
    [c] = await claim()
    await step("cancel, no grace left", lambda: cancel.request(rec, queue, c.id, grace=0))
    held = await claim(count=3)
    for c in held:
        await step(
            f"cancel {c.id}, grace", lambda c=c: cancel.request(rec, queue, c.id, grace=0.001)
        )
    [_, back, later] = held
    await step("release flagged", lambda: jobs.release(rec, queue, [(back.id, back.token)]))
    await step(
        "retry flagged",
        lambda: jobs.fail(rec, queue, later.id, later.token, "e", retry_delay_ms=60_000),
    )
    fenced = [c.id for c in held]
    deadline = await conn.execute("ZSCORE", Keyspace(queue).cancels, fenced[-1])
    await clock_past(conn, float(deadline), Keyspace(queue).meta)
    await step("fence due cancels", lambda: cancel.fence_due(rec, queue))
    # remove: one job in each state
    await step("enqueue r1", new("r1", delay_ms=600_000))
    [c] = await claim()
    await step("complete r", lambda: jobs.complete(rec, queue, c.id, c.token, b"r"))
    [c] = await claim()
    await step("fail r", lambda: jobs.fail(rec, queue, c.id, c.token, "e", dead=True))
    [active] = await claim()
    states = await _states(conn, queue, ids)
    for state in JobState:
        victim = next(i for i, s in states.items() if s is state)
        await step(f"remove {state}", lambda v=victim: jobs.remove_job(rec, queue, v))
    await step("enqueue d1", new("d1", delay_ms=600_000))
    await step("drain", lambda: admin.drain(rec, queue, include_schedule=True))
    # obliterate: again one job in each state
    for i in range(1, 5):
        await step(f"enqueue o{i}", new(f"o{i}"))
    await step("enqueue o5", new("o5", delay_ms=600_000))
    [c] = await claim()
    await step("complete o", lambda: jobs.complete(rec, queue, c.id, c.token, b"r"))
    [c] = await claim()
    await step("fail o", lambda: jobs.fail(rec, queue, c.id, c.token, "e", dead=True))
    await claim()
    await step("pause", lambda: admin.pause(rec, queue))
    await step("obliterate", lambda: admin.obliterate_all(rec, queue, force=True))
    del active
    return steps


def check_against_transitions(steps: list[Step]) -> dict[str, set[Move]]:
    """Each observed move is allowed by a script its step ran; answer the moves seen."""
    seen: dict[str, set[Move]] = {}
    for step in steps:
        for job_id, (before, after) in step.moves.items():
            allowed = [
                name for name in step.scripts if after in TRANSITIONS.get(name, {}).get(before, ())
            ]
            assert allowed, (
                f"{step.name}: job {job_id} moved {before} -> {after}, which no script it ran "
                f"({', '.join(step.scripts) or 'none'}) lists in TRANSITIONS"
            )
            for name in allowed:
                seen.setdefault(name, set()).add((before, after))
    return seen


def listed_moves() -> dict[str, set[Move]]:
    return {
        name: {(before, after) for before, targets in moves.items() for after in targets}
        for name, moves in TRANSITIONS.items()
    }
