"""Coalesced enqueues (docs/runtime.md, "Coalesced enqueues"): concurrent ``delay()`` calls
on one open queue share bulk ``enqueue.lua`` calls, each caller with its own answer.

A :class:`Gate` wrapped around the queue's connection counts the enqueue calls (and their
jobs) and can hold them before they are sent, so a test decides what is in flight.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

import echomq
from _waits import _at, until
from echomq import config, jobs
from echomq._client.coalesce import Coalescer
from echomq._scripts.keyspace import Keyspace
from echomq.errors import ConnectionLost, InvalidArgument, InvalidKey

from ._support import make_queue

WINDOW = 60.0  # s: a dedup window that never lapses inside a test


class Gate:
    """An Executor around ``conn``: records each enqueue call's job count (``sizes``) and,
    while held, keeps each call waiting before it is sent."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.sharded_pubsub = getattr(conn, "sharded_pubsub", False)
        self.sizes: list[int] = []
        self._open = trio.Event()
        self._open.set()

    def hold(self) -> None:
        self._open = trio.Event()

    def release(self) -> None:
        self._open.set()

    async def execute(self, *args: Any) -> Any:
        if args[0] == "EVALSHA":
            self.sizes.append(int(args[3 + int(args[2]) + 1]))  # ARGV[2]: the job count
            await self._open.wait()
        return await self.conn.execute(*args)


@asynccontextmanager
async def gated(q: echomq.Queue) -> AsyncIterator[tuple[Coalescer, Gate]]:
    """``q`` open, its coalescer sending through a :class:`Gate`."""
    async with q.open():
        coalescer = q.producer.coalescer
        assert coalescer is not None
        gate = coalescer.conn = Gate(coalescer.conn)
        yield coalescer, gate


def caller(results: dict[str, Any], key: str, call: Callable[[], Any]) -> Callable[[], Any]:
    """A task that stores ``call()``'s handle, or the error it raised, under ``key``."""

    async def run() -> None:
        try:
            results[key] = await call()
        except Exception as exc:
            results[key] = exc

    return run


async def first_in_flight(
    coalescer: Coalescer,
    gate: Gate,
    nursery: trio.Nursery,
    task: Callable[..., Any],
    *args: Any,
) -> None:
    """Hold the gate and start ``task``: once its call is in flight (held), the callers
    that follow queue behind it."""
    gate.hold()
    nursery.start_soon(task, *args)
    await until(lambda: coalescer.in_flight == 1)


async def written(conn: echomq.Connection, queue: str, job_id: str) -> bool:
    return await jobs.get_job(conn, queue, job_id) is not None


async def test_concurrent_delays_share_script_calls(
    conn: echomq.Connection, redis_url: str, queue: str
) -> None:
    """200 concurrent delay() calls: a few enqueue calls (INFO commandstats), 200 distinct
    ids, every row written."""
    q = make_queue(queue, redis_url)
    meta = Keyspace(queue).meta

    async def evalsha_calls() -> int:
        info = (await _at(conn, meta, "INFO", "commandstats")).decode()
        for line in info.splitlines():
            if line.startswith("cmdstat_evalsha:"):
                return int(line.split("calls=")[1].split(",")[0])
        return 0

    handles: list[echomq.TaskHandle] = []

    async def one(i: int) -> None:
        handles.append(await q.tasks["add"].delay(i, i))

    with trio.fail_after(20):
        async with q.open():
            await q.tasks["add"].delay(0, 0)  # the script is loaded
            before = await evalsha_calls()
            async with trio.open_nursery() as nursery:
                for i in range(200):
                    nursery.start_soon(one, i)
            after = await evalsha_calls()
        ids = {handle.id for handle in handles}
        assert len(ids) == 200 and not any(handle.deduplicated for handle in handles)
        assert after - before <= 10  # one lone call, then the rest together (a few)
        for job_id in ids:
            assert await written(conn, queue, job_id)


async def test_a_lone_call_is_sent_at_once(
    conn: echomq.Connection, redis_url: str, queue: str
) -> None:
    """With nothing in flight a call goes out by itself, in its caller's task; calls one
    after another are one call each."""
    q = make_queue(queue, redis_url)
    with trio.fail_after(10):
        async with gated(q) as (coalescer, gate):
            gate.hold()
            results: dict[str, Any] = {}
            async with trio.open_nursery() as nursery:
                nursery.start_soon(caller(results, "a", lambda: q.tasks["add"].delay(1, 2)))
                await until(lambda: gate.sizes == [1])  # sent, nothing else awaited
                assert coalescer.in_flight == 1 and coalescer.queued == 0
                gate.release()
            for i in range(3):
                await q.tasks["add"].delay(i, i)
            assert gate.sizes == [1, 1, 1, 1]
    assert await written(conn, queue, results["a"].id)


async def test_a_bad_job_fails_its_caller_alone(
    conn: echomq.Connection, redis_url: str, queue: str
) -> None:
    """A job that fails its checks raises in its caller's task before it is queued; its
    batch-mates go together."""
    q = make_queue(queue, redis_url)
    add = q.tasks["add"]
    results: dict[str, Any] = {}
    with trio.fail_after(10):
        async with gated(q) as (coalescer, gate), trio.open_nursery() as nursery:
            await first_in_flight(
                coalescer, gate, nursery, caller(results, "first", lambda: add.delay(0, 0))
            )
            nursery.start_soon(caller(results, "good1", lambda: add.delay(1, 1)))
            nursery.start_soon(caller(results, "range", lambda: add.apply((1, 1), priority=10**9)))
            nursery.start_soon(caller(results, "key", lambda: add.apply((1, 1), job_id="bad id")))
            nursery.start_soon(caller(results, "good2", lambda: add.delay(2, 2)))
            await until(lambda: len(results) == 2 and coalescer.queued == 2)
            gate.release()
    assert isinstance(results["range"], InvalidArgument)
    assert isinstance(results["key"], InvalidKey)
    assert gate.sizes == [1, 2]
    for name in ("first", "good1", "good2"):
        assert await written(conn, queue, results[name].id)


async def test_duplicate_ids_in_a_batch_answer_their_own_handles(
    conn: echomq.Connection, redis_url: str, queue: str
) -> None:
    """EMQDUP refuses the whole batch: it is sent again one job per call. An existing id and
    an id repeated in the batch answer deduplicated handles; the others are written."""
    q = make_queue(queue, redis_url)
    add = q.tasks["add"]
    results: dict[str, Any] = {}
    with trio.fail_after(10):
        async with gated(q) as (coalescer, gate):
            await add.apply((0, 0), job_id="exists-1")
            gate.hold()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(caller(results, "first", lambda: add.delay(0, 0)))
                await until(lambda: coalescer.in_flight == 1)
                calls = {
                    "existing": lambda: add.apply((1, 1), job_id="exists-1"),
                    "twin1": lambda: add.apply((2, 2), job_id="twin"),
                    "twin2": lambda: add.apply((3, 3), job_id="twin"),
                    "plain": lambda: add.delay(4, 4),
                }
                for name, call in calls.items():
                    nursery.start_soon(caller(results, name, call))
                await until(lambda: coalescer.queued == 4)
                gate.release()
    assert gate.sizes[1:] == [1, 4, 1, 1, 1, 1]  # exists-1; the batch; then one by one
    assert results["existing"].id == "exists-1" and results["existing"].deduplicated
    twins = [results["twin1"], results["twin2"]]  # (trio starts tasks in any order)
    assert {twin.id for twin in twins} == {"twin"}
    assert sorted(twin.deduplicated for twin in twins) == [False, True]
    assert not results["plain"].deduplicated
    assert await written(conn, queue, results["plain"].id)
    info = await jobs.get_job(conn, queue, "twin")
    assert info is not None and q.codec.decode_call(info.payload).args in {(2, 2), (3, 3)}


async def test_a_dedup_key_shared_in_a_batch_answers_the_first(
    conn: echomq.Connection, redis_url: str, queue: str
) -> None:
    """Two callers of one batch with the same dedup key: the second gets the first's id."""
    q = make_queue(queue, redis_url)
    add = q.tasks["add"]
    results: dict[str, Any] = {}
    with trio.fail_after(10):
        async with gated(q) as (coalescer, gate), trio.open_nursery() as nursery:
            await first_in_flight(
                coalescer, gate, nursery, caller(results, "first", lambda: add.delay(0, 0))
            )
            for n, name in enumerate(("one", "two"), 1):
                nursery.start_soon(
                    caller(results, name, lambda: add.apply((1, 1), dedup="k", dedup_for=WINDOW))
                )
                await until(lambda n=n: coalescer.queued == n)  # type: ignore[misc]
            gate.release()
    assert gate.sizes == [1, 2]
    assert not results["one"].deduplicated
    assert results["two"].id == results["one"].id and results["two"].deduplicated


async def test_a_cancelled_queued_caller_is_never_sent(
    conn: echomq.Connection, redis_url: str, queue: str
) -> None:
    """A caller cancelled while its job waits for the call in flight takes it out."""
    q = make_queue(queue, redis_url)
    add = q.tasks["add"]
    results: dict[str, Any] = {}
    with trio.fail_after(10):
        async with gated(q) as (coalescer, gate), trio.open_nursery() as nursery:
            await first_in_flight(
                coalescer, gate, nursery, caller(results, "first", lambda: add.delay(0, 0))
            )
            nursery.start_soon(caller(results, "kept", lambda: add.delay(1, 1)))
            await until(lambda: coalescer.queued == 1)
            scope = trio.CancelScope()
            done = trio.Event()

            async def doomed() -> None:
                with scope:
                    await add.apply((2, 2), job_id="doomed")
                done.set()

            nursery.start_soon(doomed)
            await until(lambda: coalescer.queued == 2)
            scope.cancel()
            await done.wait()
            gate.release()
    assert gate.sizes == [1, 1]
    assert await written(conn, queue, results["kept"].id)
    assert not await written(conn, queue, "doomed")


@pytest.mark.single_node("CLIENT PAUSE and CLIENT KILL on the one server")
async def test_a_lost_connection_reaches_every_caller_of_the_batch(
    conn: echomq.Connection, redis_url: str, queue: str
) -> None:
    """The connection dropped with a batch in flight: each of its callers gets
    ConnectionLost (and the lone call before it too)."""
    q = make_queue(queue, redis_url)
    add = q.tasks["add"]
    results: dict[str, Any] = {}

    async def paused_enqueuers() -> list[str]:
        """The clients whose EVALSHA waits in the server (blocked by the pause)."""
        listing = (await conn.execute("CLIENT", "LIST")).decode()
        fields = [
            dict(p.split("=", 1) for p in line.split() if "=" in p) for line in listing.splitlines()
        ]
        return [f["id"] for f in fields if f.get("cmd") == "evalsha" and "b" in f.get("flags", "")]

    async def any_paused() -> bool:
        return bool(await paused_enqueuers())

    async def kill_enqueuer() -> None:
        """Kill the queue's connection once its enqueue call waits in the server."""
        await until(any_paused)
        for client_id in await paused_enqueuers():
            await conn.execute("CLIENT", "KILL", "ID", client_id)

    with trio.fail_after(15):
        async with q.open():
            await add.delay(0, 0)  # the script is loaded
            coalescer = q.producer.coalescer
            assert coalescer is not None
            await conn.execute("CLIENT", "PAUSE", 10_000, "WRITE")
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(caller(results, "lone", lambda: add.delay(0, 0)))
                    await until(lambda: coalescer.in_flight == 1)
                    for i in range(3):
                        nursery.start_soon(caller(results, f"b{i}", lambda: add.delay(1, 1)))
                    await until(lambda: coalescer.queued == 3)
                    await kill_enqueuer()
                    await until(lambda: coalescer.in_flight == 3)
                    await kill_enqueuer()
            finally:
                await conn.execute("CLIENT", "UNPAUSE")
    assert sorted(results) == ["b0", "b1", "b2", "lone"]
    for result in results.values():
        assert isinstance(result, ConnectionLost)
    assert len({id(result) for result in results.values()}) == 4  # each caller its own


async def test_batches_keep_the_call_caps_and_each_job_its_headers(
    conn: echomq.Connection, redis_url: str, queue: str
) -> None:
    """Queued callers go in chunks of at most MAX_ENQUEUE (250) jobs; a job's headers field
    reaches its row (with the enqueue span's context added when tracing is on)."""
    q = make_queue(queue, redis_url)
    ks = Keyspace(queue)
    answers: dict[int, echomq.TaskHandle] = {}

    async def one(i: int) -> None:
        answers[i] = await q.enqueue_new(
            jobs.NewJob(payload=b"p", headers=json.dumps({"n": f"ctx-{i}"}))
        )

    with trio.fail_after(20):
        async with gated(q) as (coalescer, gate), trio.open_nursery() as nursery:
            await first_in_flight(coalescer, gate, nursery, one, 0)
            for i in range(1, 300):
                nursery.start_soon(one, i)
            await until(lambda: coalescer.queued == 299)
            gate.release()
        assert gate.sizes == [1, 250, 49]
        for i, handle in answers.items():
            row = await conn.execute("HGET", ks.job(handle.id), "headers")
            assert json.loads(row)["n"] == f"ctx-{i}"


async def test_batches_keep_the_byte_cap(
    conn: echomq.Connection, redis_url: str, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch's payloads stay within config.MAX_BATCH_BYTES: the queued jobs are split."""
    monkeypatch.setattr(config, "MAX_BATCH_BYTES", 300)
    q = make_queue(queue, redis_url)
    answers: list[echomq.TaskHandle] = []

    async def one() -> None:
        answers.append(await q.enqueue_new(jobs.NewJob(payload=b"x" * 100)))

    with trio.fail_after(10):
        async with gated(q) as (coalescer, gate), trio.open_nursery() as nursery:
            await first_in_flight(coalescer, gate, nursery, one)
            for _ in range(7):
                nursery.start_soon(one)
            await until(lambda: coalescer.queued == 7)
            gate.release()
    assert gate.sizes == [1, 3, 3, 1]
    assert len({handle.id for handle in answers}) == 8


async def test_callers_still_queued_when_the_queue_closes_fail(
    conn: echomq.Connection, redis_url: str, queue: str
) -> None:
    """A caller (outside the open block) whose job still waits when the block ends gets
    RuntimeError; its job is never sent."""
    q = make_queue(queue, redis_url)
    add = q.tasks["add"]
    results: dict[str, Any] = {}
    with trio.fail_after(10):
        async with trio.open_nursery() as outer:
            async with gated(q) as (coalescer, gate):
                await first_in_flight(
                    coalescer, gate, outer, caller(results, "lone", lambda: add.delay(0, 0))
                )
                outer.start_soon(caller(results, "late", lambda: add.apply((1, 1), job_id="late")))
                await until(lambda: coalescer.queued == 1)
            gate.release()
    assert isinstance(results["lone"], ConnectionLost)  # sent on a closed connection
    assert isinstance(results["late"], RuntimeError) and "closed" in str(results["late"])
    assert gate.sizes == [1]
    assert not await written(conn, queue, "late")


async def test_a_lone_call_after_a_script_flush_loads_the_script(
    conn: echomq.Connection, redis_url: str, queue: str
) -> None:
    """A lone call is packed from a head kept per queue and option set; once the server
    forgot the script (SCRIPT FLUSH) the next lone call still runs (EVAL loads it), and
    the one after it goes by EVALSHA again."""
    q = make_queue(queue, redis_url)
    async with q.open():
        first = await q.tasks["add"].delay(1, 2)  # its head is kept from now on
        await conn.execute("SCRIPT", "FLUSH")
        second = await q.tasks["add"].delay(3, 4)
        third = await q.tasks["add"].delay(5, 6)
    for handle in (first, second, third):
        assert await written(conn, queue, handle.id)


async def test_a_lone_calls_refusals_are_typed(
    conn: echomq.Connection, redis_url: str, queue: str
) -> None:
    """A refusal of a lone packed call is the script's typed error, as a call built
    whole would raise: a taken ``job_id`` answers the existing job (deduplicated), a
    queue of another layout version raises SchemaMismatch and writes nothing."""
    q = make_queue(queue, redis_url)
    add = q.tasks["add"]
    ks = Keyspace(queue)
    async with q.open():
        taken = await add.apply((1, 1), job_id="taken")
        again = await add.apply((2, 2), job_id="taken")
        assert (again.id, again.deduplicated, taken.deduplicated) == ("taken", True, False)
        await add.delay(1, 2)  # the plain option set's head is kept
        await conn.execute("HSET", ks.meta, "schema_version", "99")
        with pytest.raises(echomq.errors.SchemaMismatch):
            await add.delay(3, 4)
    assert await conn.execute("ZCARD", ks.pending) == 2


async def test_lone_calls_keep_a_bounded_number_of_heads(
    conn: echomq.Connection, redis_url: str, queue: str
) -> None:
    """Option sets that differ call by call (a dedup key per job) are each sent whole once
    the queue keeps its first ``_LONE_SETS`` heads: every job is written, the heads kept
    stay bounded, and a kept head still serves its set."""
    from echomq.jobs import lifecycle

    q = make_queue(queue, redis_url)
    add = q.tasks["add"]
    n = lifecycle._LONE_SETS + 6
    async with q.open():
        handles = [await add.apply((i, i), dedup=f"key-{i}", dedup_for=60) for i in range(n)]
        again = await add.apply(
            (0, 0), dedup="key-0", dedup_for=60
        )  # a kept set: its holder answers
    heads = lifecycle._LONE_HEADS.get(queue, {})
    if type(conn) is echomq.Connection:
        assert len(heads) == lifecycle._LONE_SETS
    assert (again.id, again.deduplicated) == (handles[0].id, True)
    for handle in handles:
        assert await written(conn, queue, handle.id)
