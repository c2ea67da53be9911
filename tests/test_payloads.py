"""Payloads end to end on a real Redis: tagged types as arguments and results, pydantic
models of a typed task, a msgpack queue, a codec mismatch failing its job while the
worker goes on, and an unencodable argument refused before any write."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import uuid
from decimal import Decimal
from typing import Any

import pydantic
import pytest
import trio

import echomq
from echomq.errors import JobFailed, UnencodableArgument


class Tier(enum.Enum):
    GOLD = "gold"
    SILVER = "silver"


@dataclasses.dataclass
class Line:
    sku: str
    qty: int
    price: Decimal


class Order(pydantic.BaseModel):
    id: uuid.UUID
    placed: dt.datetime
    total: Decimal


class Receipt(pydantic.BaseModel):
    order: uuid.UUID
    lines: int
    stamped: dt.datetime


def _register(q: echomq.Queue) -> tuple[Any, Any]:
    @q.task
    async def echo(
        when: dt.datetime, naive: dt.datetime, ident: uuid.UUID, amount: Decimal,
        line: Line, tier: Tier, blob: bytes, day: dt.date,
    ) -> list[Any]:  # fmt: skip
        assert isinstance(line, Line) and isinstance(tier, Tier) and isinstance(ident, uuid.UUID)
        return [when, naive, ident, amount, line, tier, blob, day, {"__emq__": "mine"}]

    @q.task
    async def receipt(order: Order, extra: list[Order] | None = None) -> Receipt:
        assert isinstance(order, Order)
        assert extra is None or all(isinstance(o, Order) for o in extra)
        return Receipt(order=order.id, lines=1 + len(extra or []), stamped=order.placed)

    return echo, receipt


ARGS = (
    dt.datetime(2026, 3, 4, 5, 6, 7, 8, tzinfo=dt.timezone(dt.timedelta(hours=-5))),
    dt.datetime(2026, 3, 4, 5, 6, 7),
    uuid.UUID("12345678-1234-5678-1234-567812345678"),
    Decimal("19.990"),
    Line("sku-1", 3, Decimal("6.66")),
    Tier.GOLD,
    b"\x00\xffbytes",
    dt.date(2026, 3, 4),
)


async def _run(q: echomq.Queue, body: Any) -> Any:
    worker = echomq.Worker(q, concurrency=2, grace=0)
    with trio.fail_after(30):
        async with q.open(), trio.open_nursery() as nursery:
            await nursery.start(worker.serve)
            try:
                return await body()
            finally:
                worker.shutdown()


@pytest.mark.parametrize("codec", ["json", "msgpack"])
async def test_tagged_types_and_pydantic_models_round_trip_through_a_worker(
    redis_url: str, queue: str, codec: str
) -> None:
    """datetime (aware and naive), UUID, Decimal, a dataclass, an enum, bytes and a date
    reach the task as themselves and come back as its result; a typed task gets its
    pydantic models and its handle answers the annotated model."""
    q = echomq.Queue(queue, url=redis_url, codec=codec)
    echo, receipt = _register(q)
    order = Order(
        id=uuid.uuid4(), placed=dt.datetime(2026, 1, 1, tzinfo=dt.UTC), total=Decimal("5.5")
    )

    async def body() -> tuple[Any, Any]:
        h1 = await echo.delay(*ARGS)
        h2 = await receipt.delay(order, extra=[order])
        return await h1.result(timeout=10), await h2.result(timeout=10)

    got, answer = await _run(q, body)
    assert got == [*ARGS, {"__emq__": "mine"}]
    assert [type(v) for v in got] == [type(v) for v in [*ARGS, {}]]
    assert got[0].utcoffset() == dt.timedelta(hours=-5) and got[1].tzinfo is None
    assert isinstance(answer, Receipt)
    assert answer == Receipt(order=order.id, lines=2, stamped=order.placed)


async def test_a_model_argument_that_does_not_validate_fails_its_job(
    redis_url: str, queue: str
) -> None:
    """Plain JSON for a model parameter is validated on the worker: a bad one fails the
    job with the parameter's name, and the worker runs the next job."""
    q = echomq.Queue(queue, url=redis_url)
    _echo, receipt = _register(q)

    async def body() -> Any:
        bad = await receipt.apply(({"id": "not-a-uuid", "placed": "x", "total": "1"},))
        with pytest.raises(JobFailed, match="argument 'order' does not fit"):
            await bad.result(timeout=10)
        good = await receipt.apply(
            ({"id": str(uuid.UUID(int=7)), "placed": "2026-01-01T00:00:00Z", "total": "1"},)
        )
        return await good.result(timeout=10)

    answer = await _run(q, body)
    assert isinstance(answer, Receipt) and answer.order == uuid.UUID(int=7)


async def test_a_worker_with_the_other_codec_fails_the_job_and_goes_on(
    redis_url: str, queue: str
) -> None:
    """A JSON producer and a msgpack worker on one queue: the job is dead with the
    mismatch named, and the worker still runs a msgpack job."""
    producer = echomq.Queue(queue, url=redis_url, codec="json")
    served = echomq.Queue(queue, url=redis_url, codec="msgpack")
    _register(producer)
    echo, _receipt = _register(served)

    async def body() -> Any:
        async with producer.open():
            wrong = await producer.tasks[echo.name].delay(*ARGS)
            with pytest.raises(JobFailed, match=r"written by the json codec.*is msgpack"):
                await wrong.result(timeout=10)
        right = await echo.delay(*ARGS)
        return await right.result(timeout=10)

    assert await _run(served, body) == [*ARGS, {"__emq__": "mine"}]


@pytest.mark.parametrize("codec", ["json", "msgpack"])
async def test_an_unencodable_argument_is_refused_before_any_write(
    redis_url: str, queue: str, codec: str
) -> None:
    """The error names the parameter and the type, and Redis holds no new key."""
    q = echomq.Queue(queue, url=redis_url, codec=codec)
    echo, _receipt = _register(q)

    class Opaque:
        pass

    async with q.open():
        before = await q.connection.execute("DBSIZE")
        keys = await q.connection.execute("KEYS", f"emq:{{{queue}}}*")
        with pytest.raises(UnencodableArgument, match=r"argument 'line'.*Opaque") as info:
            await echo.delay(*ARGS[:4], Opaque(), *ARGS[5:])
        assert info.value.argument == "line" and info.value.kind is not None
        with pytest.raises(UnencodableArgument, match="argument 'blob'"):
            echo.apply_sync(ARGS[:6], {"blob": object(), "day": ARGS[7]})
        assert await q.connection.execute("DBSIZE") == before
        assert await q.connection.execute("KEYS", f"emq:{{{queue}}}*") == keys == []
    q.close_sync()


@pytest.mark.parametrize("codec", ["json", "msgpack"])
async def test_a_steps_stored_value_comes_back_as_its_types(
    redis_url: str, queue: str, codec: str
) -> None:
    """A durable step's value is written by the queue's codec: the run after a retry gets
    the stored dataclass, Decimal and datetime back as themselves, without calling it."""
    q = echomq.Queue(queue, url=redis_url, codec=codec)
    calls: list[int] = []

    def charge() -> list[Any]:
        calls.append(1)
        return [Line("sku", 1, Decimal("2.50")), ARGS[0]]

    @q.task(max_attempts=2)
    async def checkout(job: echomq.Job) -> list[Any]:
        stored = await job.step("charge", charge)
        assert isinstance(stored[0], Line) and isinstance(stored[0].price, Decimal)
        if job.attempt == 1:
            raise echomq.Retry(delay=0)
        return [*stored, job.attempt]

    async def body() -> Any:
        return await (await checkout.delay()).result(timeout=10)

    assert await _run(q, body) == [Line("sku", 1, Decimal("2.50")), ARGS[0], 2]
    assert calls == [1]
