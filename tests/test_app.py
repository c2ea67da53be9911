"""The producer side: Queue, @queue.task, apply/delay, TaskHandle, the event feed."""

from __future__ import annotations

import datetime as dt

import pytest
import trio
import trio.testing

import echomq
from echomq import Job as Context
from echomq import jobs
from echomq.errors import InvalidArgument, InvalidKey, JobFailed, SerializationError
from echomq.events import open_event_feed


class Job:
    """A user's own class named Job: not the echomq context."""


async def takes_an_alias(ctx: Context, x: int) -> int:
    return x


async def takes_its_own_job(job: Job) -> None:
    return None


async def takes_an_unresolvable(job: NotImportedHere) -> None:  # type: ignore[name-defined]  # noqa: F821
    return None


def test_queue_and_tasks_are_declared_without_io(closed_port_url: str) -> None:
    """Queue() and @queue.task only record names and options."""
    q = echomq.Queue("declared", url=closed_port_url)

    @q.task
    async def plain(job: echomq.Job, x: int) -> int:
        return x

    @q.task(name="custom.name", max_attempts=4, backoff=2, timeout=1.5, lease=10, priority=3)
    def sync_task() -> None:
        """A sync task's docstring."""

    assert plain.name == f"{__name__}.test_queue_and_tasks_are_declared_without_io.<locals>.plain"
    assert plain.wants_job and plain.is_async
    assert not sync_task.wants_job and not sync_task.is_async
    assert sync_task.options.max_attempts == 4 and sync_task.options.lease_ms == 10_000
    assert sync_task.__doc__ == "A sync task's docstring."
    assert set(q.tasks) == {plain.name, "custom.name"}
    assert not q.is_open


def test_queue_url_defaults_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """url=None reads ECHOMQ_URL, else the local default."""
    monkeypatch.setenv("ECHOMQ_URL", "redis://example.invalid:1234/2")
    assert echomq.Queue("envq").url == "redis://example.invalid:1234/2"
    monkeypatch.delenv("ECHOMQ_URL")
    assert echomq.Queue("envq").url == "redis://127.0.0.1:6379/0"


def test_bad_names_and_options_are_refused_at_declaration() -> None:
    """A bad queue name, a duplicate task name or a bad option raises at once."""
    with pytest.raises(InvalidKey):
        echomq.Queue("no spaces")
    q = echomq.Queue("opts")

    @q.task(name="dup")
    async def first() -> None: ...

    with pytest.raises(InvalidArgument):
        q.task(name="dup")(first.fn)
    for options in (
        {"max_attempts": 0},
        {"lease": 0},
        {"timeout": -1},
        {"backoff": -1},
        {"backoff": "soon"},
        {"priority": 10_000},
    ):
        with pytest.raises(InvalidArgument):
            q.task(**options)(first.fn)  # type: ignore[call-overload]


async def test_enqueue_needs_an_open_queue_and_encodable_args(closed_port_url: str) -> None:
    """Unencodable arguments raise SerializationError before any I/O; so do bad options."""
    q = echomq.Queue("enc", url=closed_port_url)

    @q.task
    async def take(value: object) -> None: ...

    with pytest.raises(RuntimeError, match="not open"):
        await take.delay(1)
    async with q.open():  # connects lazily: the closed port is never dialled below
        with pytest.raises(SerializationError, match=r"argument 'value'.*type object"):
            await take.delay([object()])
        with pytest.raises(InvalidKey):
            await take.apply((1,), job_id="has space")
        with pytest.raises(InvalidArgument):
            await take.apply((1,), delay=-1)
        with pytest.raises(InvalidArgument):
            await take.apply((1,), delay=1, at=5.0)
        with pytest.raises(InvalidArgument):
            await take.apply(1)  # type: ignore[arg-type]


async def test_apply_writes_options_to_the_row(redis_url: str, queue: str) -> None:
    """apply(): the payload names the task; delay, at, priority and job_id reach the row."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task(max_attempts=3, priority=2)
    async def send(to: str, subject: str = "") -> None: ...

    with trio.fail_after(5):
        async with q.open():
            now = await send.apply(("a@b.c",), {"subject": "hi"}, job_id="welcome-42")
            later = await send.apply(("x",), delay=30, priority=-1)
            at = await send.apply(("y",), at=dt.datetime.now(dt.UTC) + dt.timedelta(seconds=30))
            rows = [await h.info() for h in (now, later, at)]
    assert now.id == "welcome-42"
    first, second, third = rows
    assert first is not None and first.state == "pending"
    assert first.priority == 2 and first.max_attempts == 3
    call = q.codec.decode_call(first.payload)
    assert (call.task, call.args, dict(call.kwargs)) == (send.name, ("a@b.c",), {"subject": "hi"})
    assert second is not None and second.state == "scheduled" and second.priority == -1
    assert third is not None and third.state == "scheduled"


async def test_apply_with_an_existing_job_id_answers_that_job(redis_url: str, queue: str) -> None:
    """Dedupe: a second apply with the same job_id writes nothing and answers the first."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task
    async def once(value: int) -> None: ...

    with trio.fail_after(5):
        async with q.open():
            first = await once.apply((1,), job_id="only-once")
            again = await once.apply((2,), job_id="only-once")
            info = await again.info()
    assert not first.deduplicated and again.deduplicated and again.id == first.id
    assert info is not None and q.codec.decode_call(info.payload).args == (1,)


async def test_apply_with_a_held_dedup_key_answers_the_first_job(
    redis_url: str, queue: str
) -> None:
    """docs/repeat.md: inside the window the second apply is the first job's handle."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task
    async def send(to: str) -> None: ...

    async with q.open():
        first = await send.apply(("a",), dedup="order-42", dedup_for=dt.timedelta(minutes=1))
        second = await send.apply(("b",), dedup="order-42", dedup_for=60)
        assert (first.deduplicated, second.deduplicated) == (False, True)
        assert second.id == first.id
        third = await send.apply(("c",), dedup="order-43", dedup_for=60)
        assert not third.deduplicated and third.id != first.id
        fourth = send.apply_sync(("d",), dedup="order-42", dedup_for=60)
        assert (fourth.id, fourth.deduplicated) == (first.id, True)
    with pytest.raises(InvalidArgument, match="together"):
        send.new_job(("x",), dedup="k")
    with pytest.raises(InvalidArgument, match="> 0"):
        send.new_job(("x",), dedup="k", dedup_for=0)
    with pytest.raises(InvalidKey):
        send.new_job(("x",), dedup="a b", dedup_for=5)


async def test_result_raises_job_failed_for_a_dead_job(redis_url: str, queue: str) -> None:
    """result() on a job that is already dead raises JobFailed with its error."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task
    async def doomed() -> None: ...

    with trio.fail_after(5):
        async with q.open():
            handle = await doomed.delay()
            (claimed,) = await jobs.claim(q.connection, queue, 10_000)
            await jobs.fail(q.connection, queue, handle.id, claimed.token, "kaput", dead=True)
            with pytest.raises(JobFailed) as caught:
                await handle.result(timeout=1)
    assert caught.value.error == "kaput" and caught.value.job_id == handle.id


async def test_result_waits_for_the_completion_event(redis_url: str, queue: str) -> None:
    """result() blocks until the job completes elsewhere, then answers the decoded value."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task
    async def answer() -> None: ...

    with trio.fail_after(5):
        async with q.open():
            handle = await answer.delay()
            got: list[object] = []
            async with trio.open_nursery() as nursery:

                async def wait() -> None:
                    got.append(await handle.result(timeout=4))

                nursery.start_soon(wait)
                await trio.testing.wait_all_tasks_blocked(cushion=0.01)  # result() waits
                assert got == []
                (claimed,) = await jobs.claim(q.connection, queue, 10_000)
                await jobs.complete(q.connection, queue, handle.id, claimed.token, b'{"n":42}')
            with pytest.raises(trio.TooSlowError):
                await (await answer.delay()).result(timeout=0.05)
    assert got == [{"n": 42}]


def test_current_job_outside_a_job_raises() -> None:
    """current_job() outside a running job is a RuntimeError."""
    with pytest.raises(RuntimeError):
        echomq.current_job()


def test_calling_a_task_runs_the_function_directly() -> None:
    """A task is still callable as the plain function."""
    q = echomq.Queue("direct")

    @q.task
    def double(x: int) -> int:
        return 2 * x

    assert double(21) == 42


async def test_event_feed_fans_one_subscription_out_by_job_and_name(
    redis_url: str, queue: str, conn: echomq.Connection
) -> None:
    """open_event_feed: listeners get what they asked for: one job, some names, or all."""
    with trio.fail_after(5):
        async with open_event_feed(redis_url, queue) as feed:
            with (
                feed.listen(job="a") as only_a,
                feed.listen(events=["enqueued"]) as enqueued,
                feed.listen() as everything,
            ):
                await jobs.enqueue(conn, queue, b"x", job_id="a")
                await jobs.enqueue(conn, queue, b"y", job_id="b", delay_ms=60_000)
                first = await only_a.receive()
                names = [(await enqueued.receive()).job]
                seen = [(await everything.receive()).event for _ in range(2)]
    assert (first.event, first.job) == ("enqueued", "a")
    assert names == ["a"]
    assert seen == ["enqueued", "scheduled"]


async def test_errors_leave_queue_open_unwrapped(redis_url: str, queue: str) -> None:
    """An error raised inside `async with queue.open()` arrives as itself, not in a group."""
    q = echomq.Queue(queue, url=redis_url)

    @q.task
    async def doomed() -> None: ...

    with trio.fail_after(5), pytest.raises(JobFailed):
        async with q.open():
            handle = await doomed.delay()
            (claimed,) = await jobs.claim(q.connection, queue, 10_000)
            await jobs.fail(q.connection, queue, handle.id, claimed.token, "kaput", dead=True)
            await handle.result(timeout=1)


def test_the_job_parameter_is_found_by_its_type_not_its_name(closed_port_url: str) -> None:
    """Annotations are evaluated: an alias of echomq.Job is the context; a class of one's
    own named Job is not; an annotation that does not evaluate is read as text."""
    q = echomq.Queue("annotations", url=closed_port_url)
    assert q.task(takes_an_alias).wants_job
    assert not q.task(takes_its_own_job).wants_job
    assert not q.task(takes_an_unresolvable).wants_job


async def test_a_wrong_call_raises_type_error_before_any_io(closed_port_url: str) -> None:
    """Arguments are bound against the function (less the Job parameter) at enqueue: a
    wrong call raises TypeError with nothing to talk to; right calls get as far as the
    closed queue."""
    q = echomq.Queue("bound", url=closed_port_url)

    @q.task
    async def with_job(job: echomq.Job, a: int, b: int = 0, *, scale: float) -> int:
        return a

    @q.task
    def spread(*args: int, **kwargs: int) -> int:
        return 0

    wrong = [
        lambda: with_job.delay(),
        lambda: with_job.delay(1, 2, 3, scale=1.0),
        lambda: with_job.delay(1),  # scale is required
        lambda: with_job.apply((1,), {"scale": 1.0, "c": 2}),
        lambda: with_job.delay_sync(1, 2),
        lambda: with_job.map([1]),
    ]
    for call in wrong:
        with pytest.raises(TypeError, match="with_job"):
            result = call()
            if not isinstance(result, echomq.TaskHandle):
                await result
    assert with_job.new_job((1,), {"scale": 2.0}).payload
    for right in (lambda: with_job.delay(1, scale=1.0), lambda: spread.delay(1, 2, x=3)):
        with pytest.raises(RuntimeError, match="not open"):
            await right()
    with pytest.raises(TypeError):
        echomq.chain(spread.s(), with_job.s(1, 2, 3)).flow_jobs()  # fed + 3: too many
    assert len(echomq.chain(spread.s(), with_job.s(scale=1.0)).flow_jobs()) == 1
    with pytest.raises(TypeError):
        await q.repeat(with_job, every=60, args=(1, 2, 3), key="bound-repeat")
