"""A group callable gets the task's arguments by parameter name, as the function receives
them (``_client/binding.py`` rule 3): the documented idiom ``group=lambda customer, **_:
customer`` picks one group however the call spells its arguments, from every kind of
caller and every way of enqueueing. The idiom is read from the pages that print it."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any

import pytest
import trio

import echomq
from echomq.task import Task

ROOT = Path(__file__).resolve().parent.parent
IDIOM = "group=lambda customer, **_: customer"
PRINTED = {
    "README.md": (ROOT / "README.md").read_text(),
    "docs/lanes.md": (ROOT / "docs" / "lanes.md").read_text(),
    "Queue.task's docstring": inspect.getdoc(echomq.Queue.task) or "",
}


@pytest.mark.parametrize("where", list(PRINTED))
def test_the_idiom_is_printed_as_tested(where: str) -> None:
    assert IDIOM in " ".join(PRINTED[where].split()), where


def _idiom() -> Any:
    return eval(IDIOM.removeprefix("group="))  # the text as printed


def _send(q: echomq.Queue) -> Task[[str, int], str]:
    @q.task(name="send", group=_idiom(), group_concurrency=2)
    async def send(customer: str, n: int = 1) -> str:
        return f"{customer}:{n}"

    return send


def _group(task: Task[Any, Any], *args: Any, **kwargs: Any) -> str | None:
    """The group the job of ``task(*args, **kwargs)`` goes to (no I/O)."""
    return task.queue.producer.new_job(task, args, kwargs).group


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [(("big", 1), {}), ((), {"customer": "big", "n": 1}), (("big",), {"n": 1}), (("big",), {})],
    ids=["positional", "keywords", "mixed", "a default"],
)
def test_the_idiom_picks_the_group_however_the_call_is_spelt(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    send = _send(echomq.Queue("groupkeys"))
    assert _group(send, *args, **kwargs) == "big"


def test_the_callable_sees_every_parameter_as_the_function_does() -> None:
    """Named parameters (defaults filled in), ``*args`` as a tuple and ``**kwargs`` as a
    dict under their own names; a leading Job is the worker's, not the callable's."""
    q = echomq.Queue("groupkeys")
    seen: list[dict[str, Any]] = []

    def pick(**named: Any) -> str:
        seen.append(named)
        return "g"

    @q.task(name="wide", group=pick)
    async def wide(
        job: echomq.Job, a: int, /, b: int = 2, *rest: int, c: int = 3, **more: int
    ) -> None:
        return None

    _group(wide, 1)
    _group(wide, 1, 5, 6, 7, c=8, d=9)
    assert seen == [
        {"a": 1, "b": 2, "rest": (), "c": 3, "more": {}},
        {"a": 1, "b": 5, "rest": (6, 7), "c": 8, "more": {"d": 9}},
    ]


def test_a_group_given_at_enqueue_is_called_the_same_way() -> None:
    q = echomq.Queue("groupkeys")

    @q.task(name="plain")
    async def plain(customer: str, n: int) -> None:
        return None

    job = q.producer.new_job(plain, ("acme", 1), {}, None, {"group": _idiom()})
    assert job.group == "acme"


def test_a_wrong_call_is_still_a_type_error_before_the_callable_runs() -> None:
    send = _send(echomq.Queue("groupkeys"))
    with pytest.raises(TypeError, match="send"):
        _group(send, "big", 1, 2)


def test_a_callable_that_raises_on_the_bound_arguments_refuses_the_enqueue() -> None:
    q = echomq.Queue("groupkeys")

    @q.task(name="needs", group=lambda missing, **_: missing)
    async def needs(customer: str) -> None:
        return None

    with pytest.raises(echomq.InvalidArgument, match="raised"):
        _group(needs, "big")


def test_a_flow_step_fed_the_previous_result_binds_the_rest() -> None:
    """The first argument of a fed step is the previous result, not known at enqueue:
    the callable sees the others."""
    q = echomq.Queue("groupkeys")
    seen: list[dict[str, Any]] = []

    def pick(**named: Any) -> str:
        seen.append(named)
        return named["customer"]

    @q.task(name="store", group=pick)
    async def store(previous: object, customer: str) -> None:
        return None

    job = q.producer.new_job(store, ("acme",), {}, fed=True)
    assert job.group == "acme" and seen == [{"customer": "acme"}]


async def test_every_caller_and_every_way_of_enqueueing_lands_in_the_group(
    redis_url: str, queue: str
) -> None:
    """delay, apply, map, starmap, a chain's steps, the fed one too (Trio), adelay
    (asyncio), delay_sync and starmap_sync (blocking): each job's row has group ``big``,
    and a worker runs them."""
    q = echomq.Queue(queue, url=redis_url)
    send = _send(q)

    @q.task(name="store", group=_idiom())
    async def store(previous: str, customer: str) -> str:  # fed the previous result
        return f"{customer} stored {previous}"

    def blocking() -> list[echomq.TaskHandle[str]]:
        return [send.delay_sync("big", 2), *send.starmap_sync([("big", 3)])]

    async def on_asyncio() -> echomq.TaskHandle[str]:
        try:
            return await send.adelay(customer="big", n=4)
        finally:
            await q.aclose()

    worker = echomq.Worker(q, concurrency=4, grace=0)
    with trio.fail_after(30):
        async with q.open(), trio.open_nursery() as nursery:
            handles = [
                await send.delay("big", 1),
                await send.apply((), {"customer": "big", "n": 5}),
                *await send.map(["big"]),
                *await send.starmap([("big", 6)]),
                *await trio.to_thread.run_sync(blocking),
                await trio.to_thread.run_sync(asyncio.run, on_asyncio()),
            ]
            chained = await echomq.chain(send.s("big", 7), store.s("big")).apply()
            steps = await echomq.flows.subtree(q.connection, queue, chained.id)
            chain = [q.handle(chained.id), *(q.handle(i) for _, i in steps)]
            assert len(chain) == 2
            for handle in [*handles, *chain]:
                info = await handle.info()
                assert info is not None and info.group == "big", (handle.id, info)
            await nursery.start(worker.serve)
            results = [await h.result(timeout=10) for h in handles]
            assert await chained.result(timeout=10) == "big stored big:7"
            worker.shutdown()
    q.close_sync()
    assert sorted(results) == sorted(
        ["big:1", "big:5", "big:1", "big:6", "big:2", "big:3", "big:4"]
    )
