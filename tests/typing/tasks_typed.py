"""Typing proofs for tasks: mypy --strict checks this file (tests/typing/test_typing.py).

Right calls pass and their types are asserted (``assert_type``); each wrong call carries
the ``# type: ignore[code]`` mypy must report for it (``warn_unused_ignores``: a wrong call
that stops being an error fails the check). Never run: only type-checked.
"""

from __future__ import annotations

from typing import Any, assert_type

import echomq
from echomq.app import Task
from echomq.canvas import Signature

queue = echomq.Queue("typing")


@queue.task
async def send(to: str, subject: str = "") -> bool:
    return bool(to and subject)


@queue.task
async def with_job(job: echomq.Job, count: int) -> list[int]:
    return list(range(count))


@queue.task
def plain(a: int, b: int) -> float:
    return a / b


@queue.task
def plain_with_job(job: echomq.Job, name: str) -> str:
    return name


@queue.task(name="opts", max_attempts=3)
async def with_options(x: int, *, scale: float = 1.0) -> float:
    return x * scale


@queue.task
async def untyped(a, b):  # type: ignore[no-untyped-def]
    return a + b


async def trio_calls() -> None:
    # the Job parameter is the worker's: the task takes what follows it
    one: Task[[int], list[int]] = with_job
    two: Task[[int, int], float] = plain
    three: Task[[str], str] = plain_with_job
    del one, two, three
    four: Task[[str], list[int]] = with_job  # type: ignore[assignment]
    del four

    handle = await send.delay("a@b.c", subject="hi")
    assert_type(handle, echomq.TaskHandle[bool])
    assert_type(await handle.result(timeout=5), bool)
    assert_type(await (await with_job.delay(3)).result(), list[int])
    assert_type(await (await plain.delay(1, 2)).result(), float)
    assert_type(await (await plain_with_job.delay("x")).result(), str)
    assert_type(await (await with_options.delay(2, scale=0.5)).result(), float)
    applied = await send.apply(("a@b.c",), {"subject": "hi"}, priority=1)
    assert_type(applied, echomq.TaskHandle[bool])
    assert_type(await send.map(["a", "b"]), list[echomq.TaskHandle[bool]])
    assert_type(await plain.starmap([(1, 2), (3, 4)]), list[echomq.TaskHandle[float]])
    assert_type(send.s("a@b.c"), Signature[bool])
    assert_type(await untyped.delay(1, 2, 3), echomq.TaskHandle[Any])  # untyped: anything

    await send.delay()  # type: ignore[call-arg]
    await send.delay(1)  # type: ignore[arg-type]
    await send.delay("a", "b", "c")  # type: ignore[call-arg]
    await send.delay("a", topic="x")  # type: ignore[call-arg]
    await with_job.delay("three")  # type: ignore[arg-type]
    await plain.delay(1)  # type: ignore[call-arg]
    await plain_with_job.delay("job", "x")  # type: ignore[call-arg]
    await with_options.delay(2, 0.5)  # type: ignore[call-arg]
    x: str = await (await plain.delay(1, 2)).result()  # type: ignore[assignment]
    del x


async def asyncio_calls() -> None:
    handle = await send.adelay("a@b.c", subject="hi")
    assert_type(handle, echomq.TaskHandle[bool])
    assert_type(await handle.aresult(timeout=5), bool)
    assert_type(await plain.amap([1, 2]), list[echomq.TaskHandle[float]])
    assert_type(await plain.astarmap([(1, 2)]), list[echomq.TaskHandle[float]])
    await send.adelay(1)  # type: ignore[arg-type]
    await plain.adelay()  # type: ignore[call-arg]


def blocking_calls() -> None:
    handle = send.delay_sync("a@b.c")
    assert_type(handle, echomq.TaskHandle[bool])
    assert_type(handle.result_sync(timeout=5), bool)
    assert_type(with_job.apply_sync((3,), delay=1.0), echomq.TaskHandle[list[int]])
    assert_type(plain.map_sync([1]), list[echomq.TaskHandle[float]])
    assert_type(plain.starmap_sync([(1, 2)]), list[echomq.TaskHandle[float]])
    send.delay_sync(b"bytes")  # type: ignore[arg-type]
    with_job.delay_sync()  # type: ignore[call-arg]


async def canvases() -> None:
    flow = echomq.chain(plain.s(1, 2), plain.s(3))
    assert_type(await flow.apply(), echomq.FlowHandle)
    assert_type(await flow.aapply(), echomq.FlowHandle)
    assert_type(flow.apply_sync(), echomq.FlowHandle)
    assert_type(echomq.group(send.s("a"), send.s("b")).apply_sync(), echomq.FlowHandle)
