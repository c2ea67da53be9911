"""One worker serving several queues (docs/queues.md): strict order, weights, caps, an empty
or paused queue above, one held-job table keyed by queue, the command line."""

from __future__ import annotations

import sys
from collections import Counter
from contextlib import AsyncExitStack
from typing import Any, cast

import pytest
import trio

import echomq
from echomq import admin, cancel, jobs
from echomq._worker.queues import QueueTurns
from echomq.cli import main
from echomq.cli.common import USAGE
from echomq.config import per_queue_text
from echomq.errors import ConnectionLost, InvalidArgument
from echomq.testing import open_worker_process

from ._runtime import HERE, serving, until

# -- the turn policy, plain --------------------------------------------------------------


def test_strict_order_gives_every_slot_to_the_first_open_queue() -> None:
    turns = QueueTurns(3)
    assert turns.share(8, [True, True, True], [0, 0, 0]) == [(0, 8)]
    assert turns.share(8, [False, True, True], [0, 0, 0]) == [(1, 8)]
    assert turns.share(8, [False, False, False], [0, 0, 0]) == []


def test_a_capped_queue_leaves_the_slots_above_its_cap_to_the_next() -> None:
    turns = QueueTurns(3, caps=(3, None, 2))
    assert turns.share(8, [True, True, True], [1, 0, 0]) == [(0, 2), (1, 6)]
    assert turns.share(8, [True, False, True], [3, 0, 0]) == [(2, 2)]


def test_weights_deal_the_slots_in_proportion_one_at_a_time() -> None:
    turns = QueueTurns(3, weights=(5, 3, 1))
    dealt = Counter[int]()
    for _ in range(900):  # one free slot at a time still comes out in proportion
        ((queue, count),) = turns.share(1, [True, True, True], [0, 0, 0])
        dealt[queue] += count
    assert dealt == {0: 500, 1: 300, 2: 100}
    assert turns.share(9, [True, True, True], [0, 0, 0]) == [(0, 5), (1, 3), (2, 1)]
    assert turns.share(8, [True, False, True], [0, 0, 0]) == [(0, 7), (2, 1)]


def test_bad_weights_and_caps_are_refused_before_any_io() -> None:
    a, b = echomq.Queue("multi-a"), echomq.Queue("multi-b")
    for options in (
        {"weights": (5,)},
        {"weights": (1, 0)},
        {"weights": [1, -2]},
        {"caps": (1, 2, 3)},
        {"caps": (0, None)},
        {"weights": "5,3"},
    ):
        with pytest.raises(InvalidArgument):
            echomq.Worker([a, b], **options)
    with pytest.raises(InvalidArgument):
        echomq.Worker([a, echomq.Queue("multi-a")])  # one name twice
    with pytest.raises(InvalidArgument):
        echomq.Worker([])
    with pytest.raises(InvalidArgument, match="one URL"):
        echomq.Worker([a, echomq.Queue("multi-c", url="redis://127.0.0.1:1/0")])
    worker = echomq.Worker([a, b], weights=[2, 1], caps=[None, 4])
    assert worker.config.weights == (2, 1) and worker.config.caps == (None, 4)


def test_weights_and_caps_read_from_flags_and_variables() -> None:
    """``--weights 5,3,1`` / ``$ECHOMQ_WEIGHTS``; ``--caps 10,0,5`` (0: no cap); the form
    ``--processes`` hands its children reads back the same."""
    env = {"ECHOMQ_WEIGHTS": "5,3,1", "ECHOMQ_CAPS": "10,0,5"}
    config = echomq.WorkerConfig.from_env(env)
    assert config.weights == (5, 3, 1) and config.caps == (10, None, 5)
    assert per_queue_text(config.caps) == "10,0,5"
    assert echomq.WorkerConfig.from_env({"ECHOMQ_CAPS": per_queue_text((None, 2))}).caps == (
        None,
        2,
    )
    with pytest.raises(InvalidArgument):
        echomq.WorkerConfig.from_env({"ECHOMQ_WEIGHTS": "5,x"})


# -- a worker serving several queues -----------------------------------------------------


def _queues(redis_url: str, queue: str, *names: str) -> list[echomq.Queue]:
    return [echomq.Queue(f"{queue}-{name}", url=redis_url) for name in names]


async def _open_all(stack: AsyncExitStack, queues: list[echomq.Queue]) -> None:
    for q in queues:
        await stack.enter_async_context(q.open())
        await admin.ensure_schema(q.connection, q.name)


async def test_strict_order_runs_every_job_above_before_one_below(
    redis_url: str, queue: str
) -> None:
    queues = _queues(redis_url, queue, "high", "default", "low")
    ran: list[str] = []
    tasks = []
    for q in queues:

        @q.task(name="work")
        async def work(job: echomq.Job) -> None:
            ran.append(job.queue)

        tasks.append(work)
    with trio.fail_after(60):
        async with AsyncExitStack() as stack:
            await _open_all(stack, queues)
            for task in reversed(tasks):  # the lowest first: order is not enqueue order
                await task.starmap([()] * 20)
            worker = echomq.Worker(queues, concurrency=1, prefetch=0)
            async with serving(worker):
                await until(lambda: len(ran) == 60, 30)
    assert ran == [q.name for q in queues for _ in range(20)]


async def test_weights_serve_each_queue_in_proportion_while_all_have_work(
    redis_url: str, queue: str
) -> None:
    """Weights 5,3,1 over 3,000 jobs, counted while every queue still has work (2,000
    each): each queue's share within 10 % of its weight's."""
    queues = _queues(redis_url, queue, "a", "b", "c")
    ran: list[str] = []
    tasks = []
    for q in queues:

        @q.task(name="work")
        async def work(job: echomq.Job) -> None:
            ran.append(job.queue)

        tasks.append(work)
    with trio.fail_after(120):
        async with AsyncExitStack() as stack:
            await _open_all(stack, queues)
            for task in tasks:
                await task.starmap([()] * 2000)
            worker = echomq.Worker(queues, concurrency=18, weights=(5, 3, 1))
            async with serving(worker):
                await until(lambda: len(ran) >= 3000, 60)
    served = Counter(ran[:3000])
    for q, weight in zip(queues, (5, 3, 1), strict=True):
        share, expected = served[q.name] / 3000, weight / 9
        assert abs(share - expected) <= 0.1 * expected, (q.name, served)
        assert served[q.name] < 2000  # it still had work throughout


async def test_an_empty_queue_above_costs_nothing_measurable(redis_url: str, queue: str) -> None:
    """The empty queue is asked once, then rests on its wake list: while 1,500 jobs run
    from the queue below it, it gets about one claim per idle cap (1 s), not one per pass."""
    empty, busy = _queues(redis_url, queue, "empty", "busy")
    done = [0]

    @busy.task(name="work")
    async def work() -> None:
        done[0] += 1

    @empty.task(name="work")
    async def never() -> None:
        raise AssertionError("the empty queue has no job")

    with trio.fail_after(60):
        async with AsyncExitStack() as stack:
            await _open_all(stack, [empty, busy])
            await work.starmap([()] * 1500)
            worker = echomq.Worker([empty, busy], concurrency=4, prefetch=0)
            async with serving(worker):
                started = trio.current_time()
                await until(lambda: done[0] == 1500, 50)
                took = trio.current_time() - started
                stats = worker.statistics()
    to_empty, to_busy = stats.queue_claims
    assert to_busy >= 1500 / 4  # one claim per free pair of slots, or so
    assert to_empty <= 2 + 2 * took, (to_empty, took)  # about one per second, not per pass
    assert stats.queues == (empty.name, busy.name)


async def test_a_paused_queue_is_skipped_and_served_once_resumed(
    redis_url: str, queue: str
) -> None:
    paused, other = _queues(redis_url, queue, "paused", "other")
    ran: list[str] = []
    tasks = []
    for q in (paused, other):

        @q.task(name="work")
        async def work(job: echomq.Job) -> None:
            ran.append(job.queue)

        tasks.append(work)
    with trio.fail_after(60):
        async with AsyncExitStack() as stack:
            await _open_all(stack, [paused, other])
            await admin.pause(paused.connection, paused.name)
            held = await tasks[0].starmap([()] * 5)
            await tasks[1].starmap([()] * 5)
            worker = echomq.Worker([paused, other], concurrency=2)
            async with serving(worker):
                await until(lambda: len(ran) == 5)
                assert ran == [other.name] * 5
                for handle in held:
                    info = await handle.info()
                    assert info is not None and info.state == "pending"
                assert worker.statistics().queue_claims[0] <= 3
                await admin.resume(paused.connection, paused.name)  # its wake token
                await until(lambda: len(ran) == 10)
    assert ran[5:] == [paused.name] * 5


async def test_a_cap_bounds_one_queue_while_the_others_use_the_slots(
    redis_url: str, queue: str
) -> None:
    capped, free = _queues(redis_url, queue, "capped", "free")
    gate = trio.Event()
    running = Counter[str]()
    most = Counter[str]()

    for q in (capped, free):

        @q.task(name="hold")
        async def hold(job: echomq.Job) -> None:
            running[job.queue] += 1
            most[job.queue] = max(most[job.queue], running[job.queue])
            await gate.wait()
            running[job.queue] -= 1

    with trio.fail_after(60):
        async with AsyncExitStack() as stack:
            await _open_all(stack, [capped, free])
            for q in (capped, free):
                await q.tasks["hold"].starmap([()] * 6)  # type: ignore[attr-defined]
            worker = echomq.Worker([capped, free], concurrency=8, prefetch=0, caps=(2, None))
            async with serving(worker):
                await until(lambda: running[capped.name] == 2 and running[free.name] == 6)
                assert worker.statistics().held == 8
                gate.set()
                await until(lambda: sum(running.values()) == 0 and worker.statistics().held == 0)
                await until(lambda: worker.statistics().completed == 12)
    assert most[capped.name] == 2


async def test_one_id_on_two_queues_is_two_held_jobs(redis_url: str, queue: str) -> None:
    """The held-job table keys by queue: the same job id claimed from two queues at once
    is two jobs, each renewed, cancelled and settled on its own queue."""
    one, two = _queues(redis_url, queue, "one", "two")
    gate = trio.Event()
    started: list[str] = []
    tasks = []
    for q in (one, two):

        @q.task(name="hold")
        async def hold(job: echomq.Job) -> str:
            started.append(job.queue)
            await gate.wait()
            return job.queue

        tasks.append(hold)
    with trio.fail_after(30):
        async with AsyncExitStack() as stack:
            await _open_all(stack, [one, two])
            handles = [await task.apply(job_id="same") for task in tasks]
            worker = echomq.Worker([one, two], concurrency=4)
            async with serving(worker):
                await until(lambda: len(started) == 2)
                assert worker.statistics().held == 2
                assert worker._keeper is not None
                await worker._keeper.tick()  # each renewed on its own queue
                assert worker.statistics().lost == 0
                await cancel.request(two.connection, two.name, "same", "enough")
                await until(lambda: worker.statistics().cancelled == 1)
                gate.set()
                assert await handles[0].result(timeout=10) == one.name
                info = await jobs.get_job(two.connection, two.name, "same")
                assert info is not None and info.state == "cancelled"


async def test_a_job_arriving_above_is_claimed_while_the_queue_below_keeps_the_worker_busy(
    redis_url: str, queue: str
) -> None:
    """The resting queue above wakes on its wake token: its new job runs at once, long
    before the backlog below is done (strict order, the queue above first)."""
    high, low = _queues(redis_url, queue, "high", "low")
    ran: list[str] = []

    @low.task(name="slow")
    async def slow(job: echomq.Job) -> None:
        ran.append(job.queue)
        await trio.sleep(0.01)

    @high.task(name="urgent")
    async def urgent(job: echomq.Job) -> None:
        ran.append(job.queue)

    with trio.fail_after(60):
        async with AsyncExitStack() as stack:
            await _open_all(stack, [high, low])
            await slow.starmap([()] * 400)  # 400 x 10 ms on 2 slots: about 2 s
            worker = echomq.Worker([high, low], concurrency=2, prefetch=0)
            async with serving(worker):
                await until(lambda: len(ran) >= 20)
                await urgent.delay()
                await until(lambda: high.name in ran, 2)
                assert ran.count(low.name) < 300  # the backlog below is far from done


async def test_a_stop_hands_every_queues_jobs_back_to_their_own_queue(
    redis_url: str, queue: str
) -> None:
    one, two = _queues(redis_url, queue, "one", "two")
    started: list[str] = []
    tasks = []
    for q in (one, two):

        @q.task(name="forever")
        async def forever(job: echomq.Job) -> None:
            started.append(job.queue)
            await trio.sleep_forever()

        tasks.append(forever)
    with trio.fail_after(30):
        async with AsyncExitStack() as stack:
            await _open_all(stack, [one, two])
            handles = [await task.delay() for task in tasks for _ in range(2)]
            worker = echomq.Worker([one, two], concurrency=4, grace=0)
            async with serving(worker):
                await until(lambda: len(started) == 4)
            assert worker.statistics().released == 4
            for handle in handles:
                info = await handle.info()
                assert info is not None and info.state == "pending"


class FailsFirst:
    """A connection whose next ``failures`` calls are lost (its queue's master gone for a
    moment); then it is the connection it wraps."""

    def __init__(self, conn: Any, failures: int) -> None:
        self._conn, self.failures = conn, failures

    def _fail(self) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise ConnectionLost("the test's lost connection")

    async def execute(self, *args: Any) -> Any:
        self._fail()
        return await self._conn.execute(*args)

    async def execute_packed(self, packed: bytes) -> Any:
        self._fail()
        return await self._conn.execute_packed(packed)

    async def execute_pipeline(self, commands: Any) -> Any:
        self._fail()
        return await self._conn.execute_pipeline(commands)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


async def test_a_queue_whose_claims_fail_is_set_aside_while_the_others_are_served(
    redis_url: str, queue: str
) -> None:
    first, second = _queues(redis_url, queue, "first", "second")
    ran: list[str] = []
    tasks = []
    for q in (first, second):

        @q.task(name="work")
        async def work(job: echomq.Job) -> None:
            ran.append(job.queue)

        tasks.append(work)
    with trio.fail_after(30):
        async with AsyncExitStack() as stack:
            await _open_all(stack, [first, second])
            worker = echomq.Worker([first, second], concurrency=2)
            async with serving(worker):
                assert worker._parts is not None
                sources = worker._parts.claims.sources
                await until(lambda: all(s.resting for s in sources))  # both found empty
                source = sources[0]
                failing = FailsFirst(source.wake_conn, 1_000_000)
                source.wake_conn = cast(Any, failing)  # its claims fail until told
                for task in tasks:
                    await task.starmap([()] * 10)
                await until(lambda: len(ran) == 10, 10)  # the second's, while the first fails
                assert ran == [second.name] * 10
                failing.failures = 0  # its master is back
                await until(lambda: len(ran) == 20, 10)
    assert ran[10:] == [first.name] * 10


async def test_the_command_line_serves_both_queues(redis_url: str, queue: str) -> None:
    """``echomq worker _multi_tasks:first _multi_tasks:second --weights 2,1 --caps 0,3``
    starts and runs the jobs of both."""
    first, second = _queues(redis_url, queue, "first", "second")
    env = {"EMQ_TEST_FIRST": first.name, "EMQ_TEST_SECOND": second.name}
    entry = [sys.executable, "-m", "echomq", "worker", "_multi_tasks:first"]
    tasks = []
    for q in (first, second):

        @q.task(name="echo")
        async def echo(n: int) -> str:
            raise AssertionError("run by the worker process")

        tasks.append(echo)
    with trio.fail_after(60):
        async with (
            open_worker_process(
                "_multi_tasks:second",
                url=redis_url,
                cwd=HERE,
                env=env,
                entry=entry,
                args=("--weights", "2,1", "--caps", "0,3"),
            ) as proc,
            first.open(),
            second.open(),
        ):
            assert proc.queue == first.name
            handles = [await task.delay(7) for task in tasks]
            assert [await h.result(timeout=20) for h in handles] == ["first 7", "second 7"]


@pytest.mark.single_node("supervising processes does not depend on the backend")
async def test_processes_each_serve_every_queue_with_the_same_weights(
    redis_url: str, queue: str
) -> None:
    """``--processes 2`` hands each child every target and the per-queue options."""
    first, second = _queues(redis_url, queue, "first", "second")
    env = {"EMQ_TEST_FIRST": first.name, "EMQ_TEST_SECOND": second.name}
    entry = [sys.executable, "-m", "echomq", "worker", "_multi_tasks:first"]
    tasks = []
    for q in (first, second):

        @q.task(name="echo")
        async def echo(n: int) -> str:
            raise AssertionError("run by the worker processes")

        tasks.append(echo)
    with trio.fail_after(60):
        async with (
            open_worker_process(
                "_multi_tasks:second",
                url=redis_url,
                cwd=HERE,
                env=env,
                entry=entry,
                args=("--processes", "2", "--weights", "3,1", "--caps", "0,2"),
            ) as proc,
            first.open(),
            second.open(),
        ):
            await until(lambda: proc.output.count("worker serving") == 2, 20)
            assert proc.output.count("(weights (3, 1), caps (None, 2))") == 2
            handles = [await task.delay(n) for task in tasks for n in range(10)]
            answers = [await h.result(timeout=20) for h in handles]
    assert answers == [f"first {n}" for n in range(10)] + [f"second {n}" for n in range(10)]


def test_the_command_line_refuses_weights_that_do_not_fit() -> None:
    assert main(["worker", "a:x", "b:y", "--weights", "1,2,3"]) == USAGE
    assert main(["worker", "a:x", "b:y", "--caps", "1,-1"]) == USAGE
