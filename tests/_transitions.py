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
from echomq import admin, cancel, flows, jobs, stalled
from echomq._model.errback import encode_spec
from echomq._model.job import NewJob
from echomq._model.states import TRANSITIONS, JobState
from echomq._model.steps import StepRecord
from echomq._scripts.calls import SCRIPTS, evaluate, script_call
from echomq._scripts.keyspace import Keyspace
from echomq.jobs import steps as step_verbs

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

    async def past_deadline(job_id: str) -> None:
        deadline = await conn.execute("HGET", Keyspace(queue).job(job_id), "expires_at")
        await clock_past(conn, float(deadline), Keyspace(queue).meta)

    async def expire(job_id: str) -> None:
        """``job_id`` first in line with a deadline of 1 ms: once it passed, the claim drops
        it into expired (kept in the dead index: a count guard there trims by it)."""
        await step(f"enqueue {job_id}", new(job_id, priority=300, expires_ms=1))
        await past_deadline(job_id)
        await claim()

    async def errback(job_id: str) -> None:
        """Give ``job_id`` an error callback on this queue (last in line: it is claimed
        after every job of the script's order): its death enqueues ``eb-<id>``."""
        ids.append(f"eb-{job_id}")
        spec = encode_spec(queue, NewJob(payload=b"x", job_id=f"eb-{job_id}", priority=-4095))
        await conn.execute("HSET", Keyspace(queue).job(job_id), "errback", spec)

    # flows (docs/flows.md), first, on an empty pending set
    def tree(parent: str, kids: Sequence[str], policy: str = "fail") -> flows.FlowJob:
        ids.extend([parent, *kids])
        children = tuple(
            flows.FlowJob(job=NewJob(payload=b"x", job_id=k), queue=queue) for k in kids
        )
        return flows.FlowJob(
            job=NewJob(payload=b"x", job_id=parent),
            queue=queue,
            children=children,
            policy=flows.Policy(policy),
        )

    def raw_flow(
        nodes: list[list[Any]], releases: Sequence[str] = ()
    ) -> Callable[[], Awaitable[Any]]:
        ks = Keyspace(queue)
        argv: list[Any] = [ks.base, len(nodes), len(releases), *releases]
        for node in nodes:
            ids.append(node[0]) if node[0] not in ids else None
            argv += node
        call = script_call(
            "add_flow", [ks.pending, ks.waiting, ks.meta, ks.wake, ks.schedule], argv, lambda r: r
        )
        return lambda: evaluate(rec, call)

    def node(
        job_id: str, parent: str = "", kids: str = "", held: str = "", delay: int = 0
    ) -> list[Any]:
        return [
            job_id,
            b"x",
            0,
            1,
            "",
            "",
            "",
            parent,
            "",
            "fail",
            "none",
            kids,
            held,
            "",
            delay,
            "",
            "",
        ]

    async def run(job_id: str, *, dead: bool = False, lease_ms: int = 60_000) -> echomq.Claimed:
        [c] = await claim(lease_ms)
        assert c.id == job_id, (c.id, job_id)
        if dead:
            await step(
                f"fail {job_id}", lambda: jobs.fail(rec, queue, c.id, c.token, "e", dead=True)
            )
        elif lease_ms == 60_000:
            await step(f"complete {job_id}", lambda: jobs.complete(rec, queue, c.id, c.token, b"1"))
        return c

    await step("flow add", lambda: flows.add_flow(rec, [tree("fa", ["fa1", "fa2"])]))
    await run("fa1")
    await run("fa2")  # complete: the parent becomes pending
    await run("fa")
    await step("flow add fb", lambda: flows.add_flow(rec, [tree("fb", ["fb1"])]))
    await errback("fb1")
    await run("fb1", dead=True)  # fail: the parent becomes pending (policy fail)
    await run("fb", dead=True)
    await step("reprocess fb1", lambda: jobs.reprocess_job(rec, queue, "fb1"))  # fb dead -> waiting
    await run("fb1")
    await run("fb")
    await step("flow add fc", lambda: flows.add_flow(rec, [tree("fc", ["fc1", "fc2"])]))
    await run("fc1", dead=True)
    await step(
        "reprocess fc1", lambda: jobs.reprocess_job(rec, queue, "fc1")
    )  # fc pending -> waiting
    await run("fc1")
    await run("fc2")
    await run("fc")
    await step("flow add fd", lambda: flows.add_flow(rec, [tree("fd", ["fd1"])]))
    await errback("fd1")
    await lapse([await run("fd1", lease_ms=1)])
    await step("reap fd1", lambda: jobs.reap_counted(rec, queue, max_recoveries=0))
    await run("fd")
    await step("flow add fe", lambda: flows.add_flow(rec, [tree("fe", ["fe1"])]))
    await errback("fe1")
    await lapse([await run("fe1", lease_ms=1)])
    await step("sweep fe1", lambda: stalled.check(rec, queue, max_stalled=1))
    await run("fe")
    for gone in ("fd1", "fe1"):
        await step(f"remove {gone}", lambda g=gone: jobs.remove_job(rec, queue, g))
    await step("flow add ff", lambda: flows.add_flow(rec, [tree("ff", ["ff1"])]))
    await step("cancel ff", lambda: cancel.request(rec, queue, "ff"))  # a waiting parent
    await step("cancel ff1", lambda: cancel.request(rec, queue, "ff1"))
    await step("flow add fg", lambda: flows.add_flow(rec, [tree("fg", ["fg1"], "ignore")]))
    await step("cancel fg1", lambda: cancel.request(rec, queue, "fg1"))  # fg -> pending
    await run("fg")
    await step("flow add fh", lambda: flows.add_flow(rec, [tree("fh", ["fh1"], "ignore")]))
    await step("remove fh1", lambda: jobs.remove_job(rec, queue, "fh1"))  # fh -> pending
    await run("fh")
    await step("flow page 1", raw_flow([node("H", kids="1", held="1"), node("h0", parent="H")]))
    await run("h0")
    await step("flow page 2", raw_flow([node("x0")], releases=["H"]))  # H -> pending
    await step("flow delayed leaf", raw_flow([node("flow-delayed", delay=600_000)]))  # -> scheduled
    await run("x0")
    await run("H")
    await step("flow add fi", lambda: flows.add_flow(rec, [tree("fi", ["fi1"])]))
    fi1 = await run("fi1", lease_ms=1000)  # held: the batch completes it, fi -> pending
    await step(
        "complete_many fi1", lambda: jobs.complete_many(rec, queue, [(fi1.id, fi1.token, b"1")])
    )
    await run("fi")

    # a child on another queue: its outcome, or its re-run (reopen, by generation),
    # relayed from that queue's outbox (the script alone, here)
    def remote_tree(parent: str, kid: str) -> flows.FlowJob:
        ids.append(parent)
        child = flows.FlowJob(job=NewJob(payload=b"x", job_id=kid), queue=queue + "-x")
        return flows.FlowJob(
            job=NewJob(payload=b"x", job_id=parent), queue=queue, children=(child,)
        )

    def notify(parent: str, kid: str, state: str, gen: int) -> Callable[[], Awaitable[Any]]:
        return lambda: evaluate(rec, flows.flow_notify_call(queue, parent, kid, state, b"1", gen))

    await step("flow add fj", lambda: flows.add_flow(rec, [remote_tree("fj", "fj1")]))
    await step("flow_notify fj1", notify("fj", "fj1", "completed", 0))  # fj -> pending
    await run("fj")
    await step("flow add fl", lambda: flows.add_flow(rec, [remote_tree("fl", "fl1")]))
    await step("flow_notify fl1 dead", notify("fl", "fl1", "dead", 0))  # fl -> pending
    await step("flow_notify fl1 reopen", notify("fl", "fl1", "reopen", 1))  # fl -> waiting
    await step("flow_notify fl1 dead 1", notify("fl", "fl1", "dead", 1))  # fl -> pending
    await run("fl", dead=True)
    await step("flow_notify fl1 reopen 2", notify("fl", "fl1", "reopen", 2))  # dead -> waiting
    await step("flow_notify fl1 done", notify("fl", "fl1", "completed", 2))  # fl -> pending
    await run("fl")
    # a flow child fenced by fence_cancels (its grace ran out): its parent -> pending
    await step("flow add fk", lambda: flows.add_flow(rec, [tree("fk", ["fk1"])]))
    await run("fk1", lease_ms=60_001)  # held, not settled
    await step("cancel fk1, grace", lambda: cancel.request(rec, queue, "fk1", grace=0.001))
    fk1_deadline = await conn.execute("ZSCORE", Keyspace(queue).cancels, "fk1")
    await clock_past(conn, float(fk1_deadline), Keyspace(queue).meta)
    await step("fence fk1", lambda: cancel.fence_due(rec, queue))
    await run("fk")
    # expiry (docs/runtime.md "Expiry"): a delayed job past its deadline expires at its
    # promotion, and a flow child with an error callback in the same claim: its parent
    # sees a failed child (-> pending), its error callback is enqueued
    await step("enqueue se", new("se", delay_ms=1, expires_ms=1))
    await due(conn, queue, "se")
    await past_deadline("se")
    ids.extend(["fm", "fm1"])
    expiring = flows.FlowJob(job=NewJob(payload=b"x", job_id="fm1", expires_ms=1), queue=queue)
    fm = flows.FlowJob(job=NewJob(payload=b"x", job_id="fm"), queue=queue, children=(expiring,))
    await step("flow add fm", lambda: flows.add_flow(rec, [fm]))
    await errback("fm1")
    await past_deadline("fm1")
    assert await claim() == []  # se and fm1 expire
    await run("fm")
    # dynamic children (docs/flows.md): a running job spawns one, waits, is resumed
    await step("enqueue dy", new("dy", priority=50))
    dy = await run("dy", lease_ms=60_001)  # held, not settled
    ids.append("dy1")
    kid = flows.FlowJob(job=NewJob(payload=b"x", job_id="dy1", priority=50), queue=queue)
    record = StepRecord(name="spawn-1", state="done", token=dy.token).encode()
    spawn = flows.Spawn(queue, "dy", dy.token, "spawn-1", record)
    await step("spawn dy1", lambda: flows.spawn_children(rec, spawn, [kid]))
    await step("wait dy", lambda: flows.wait_children(rec, queue, "dy", dy.token))
    await run("dy1")  # dy -> pending
    await run("dy")

    for i in range(1, 18):
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
    # a run settled cancelled: its own state and index, under the same count guard
    for i in (1, 2, 3):
        await step(f"enqueue x{i}", new(f"x{i}", priority=9))
    [x] = await claim()
    await step(
        "complete cancelled", lambda: jobs.complete(rec, queue, x.id, x.token, b"cancelled:why")
    )
    [x] = await claim()
    await step(  # the cancelled row of x1 goes
        "complete cancelled, trim",
        lambda: jobs.complete(rec, queue, x.id, x.token, b"cancelled:"),
    )
    [x] = await claim()
    await step(  # the worker's batch: the cancelled row of x2 goes
        "complete many cancelled, trim",
        lambda: jobs.complete_many(rec, queue, [(x.id, x.token, b"cancelled:no")]),
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
    await expire("e1")  # the reaped row goes; e1 is the last, for the next counted reap
    held = await claim(lease_ms=1)
    await lapse(held)
    await step("reap counted, expired", lambda: jobs.reap_counted(rec, queue, max_recoveries=0))
    held = await claim(lease_ms=1)
    await lapse(held)
    await step("sweep, below", lambda: stalled.check(rec, queue, max_stalled=5))
    held = await claim(lease_ms=1)
    await lapse(held)
    await step("sweep, at", lambda: stalled.check(rec, queue, max_stalled=1))
    await expire("e2")  # the swept row goes
    await expire("e3")  # e2 goes; e3 is the last, for the next sweep
    held = await claim(lease_ms=1)
    await lapse(held)
    await step("sweep, at, expired", lambda: stalled.check(rec, queue, max_stalled=1))
    [c] = await claim()
    await step("fail dead, trim", lambda: jobs.fail(rec, queue, c.id, c.token, "e", dead=True))
    await expire("e4")  # the dead row goes; e4 is the last, for the next dead-lettering
    [c] = await claim()
    await step(
        "fail dead, trim expired", lambda: jobs.fail(rec, queue, c.id, c.token, "e", dead=True)
    )
    [c] = await claim()
    await step("release", lambda: jobs.release(rec, queue, [(c.id, c.token)]))
    [c] = await claim()
    await step("sleep", lambda: step_verbs.sleep(rec, queue, c.id, c.token, "nap", 600_000))
    [c] = await claim()
    await step("rate_limited", lambda: jobs.rate_limited(rec, queue, c.id, c.token, 600_000))
    await conn.execute("HDEL", Keyspace(queue).meta, "blocked_until")  # the queue goes on
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
    # the retention sweep: rows of echomq 0.1 (no TTL) whose retention ended long ago (a
    # cancelled one is such a row migrated to the cancelled index)
    ks = Keyspace(queue)
    for job_id, state in (("v1", "completed"), ("v2", "dead"), ("v3", "cancelled")):
        ids.append(job_id)
        await conn.execute("HSET", ks.job(job_id), "state", state, "finished_at", 1)
        await conn.execute("ZADD", ks.base + state, 1, job_id)
    await step("retention sweep", lambda: admin.sweep_retention(rec, queue))
    # remove: one job in each state
    await step("enqueue r1", new("r1", delay_ms=600_000))
    [c] = await claim()
    await step("complete r", lambda: jobs.complete(rec, queue, c.id, c.token, b"r"))
    [c] = await claim()
    await step("fail r", lambda: jobs.fail(rec, queue, c.id, c.token, "e", dead=True))
    await admin.set_retention(conn, queue, max_dead=1000)  # the dead row stays
    await expire("r0")
    [active] = await claim()
    await step("flow held W", raw_flow([node("W", kids="", held="1")]))
    states = await _states(conn, queue, ids)
    for state in JobState:
        victim = next(i for i, s in states.items() if s is state)
        force = state is JobState.WAITING  # a parent with open children: refused unless forced
        await step(
            f"remove {state}", lambda v=victim, f=force: jobs.remove_job(rec, queue, v, force=f)
        )
    # a flow's cancel or removal (flow_cancel): again one job in each state, each the top
    # of its own subtree, then a cancelled child whose parent it frees
    await step("enqueue r2", new("r2", delay_ms=600_000))
    for i in range(4, 7):  # claimed next (the highest priority): completed, dead, active
        await step(f"enqueue r{i}", new(f"r{i}", priority=200))
    [c] = await claim()
    await step("complete r2", lambda: jobs.complete(rec, queue, c.id, c.token, b"r"))
    [c] = await claim()
    await step("fail r2", lambda: jobs.fail(rec, queue, c.id, c.token, "e", dead=True))
    [active2] = await claim()
    await step("flow held W2", raw_flow([node("W2", kids="", held="1")]))
    await step("enqueue r3", new("r3"))
    await expire("r7")
    states = await _states(conn, queue, ids)
    for state in JobState:
        victim = next(i for i, s in states.items() if s is state)
        await step(f"remove flow {state}", lambda v=victim: flows.remove_flow(rec, queue, v))
    await step("flow add fx", lambda: flows.add_flow(rec, [tree("fx", ["fx1"], "ignore")]))
    await step("cancel flow fx1", lambda: flows.cancel_flow(rec, queue, "fx1"))  # fx -> pending
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
    await expire("o6")
    await step("flow held O", raw_flow([node("O", kids="", held="1")]))
    await step("pause", lambda: admin.pause(rec, queue))
    await step("obliterate", lambda: admin.obliterate_all(rec, queue, force=True))
    del active, active2
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
