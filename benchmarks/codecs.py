"""The JSON and msgpack codecs on a typed payload: codec µs per call, and jobs/s end to end.

    python -m benchmarks codecs [--reps 5] [--jobs 5000] [--concurrency 32] [--publish]

Each repetition runs both codecs, in alternating order (a loaded machine drifts: both
see the drift), on one private redis-server: ``--jobs`` jobs whose arguments are a
datetime, a UUID, a Decimal, an enum, bytes and a list of three dataclasses, enqueued in
chunks of 250 (``starmap``) and run by an in-process worker whose task returns them; the
clock starts at the first enqueue and stops when the last result is stored. The codec
figures are the payload's ``encode_call`` + ``decode_call`` and its result's
``encode_result`` + ``decode_result``, µs per job, in this process, without Redis.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import enum
import statistics
import time
import uuid
from decimal import Decimal
from typing import Any

import trio

import echomq
from echomq.testing import RedisServer

from . import files, machine, tables
from .stats import Results

__all__ = ["main", "run"]

CODECS = ("json", "msgpack")


class Tier(enum.Enum):
    GOLD = "gold"


@dataclasses.dataclass
class Line:
    sku: str
    qty: int
    price: Decimal


ARGS = (
    dt.datetime(2026, 3, 4, 5, 6, 7, tzinfo=dt.UTC),
    uuid.UUID(int=42),
    Decimal("19.99"),
    Tier.GOLD,
    b"\x00" * 32,
    [Line(f"sku-{i}", i, Decimal("1.50")) for i in range(3)],
)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks codecs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--jobs", type=int, default=5000, help="jobs per codec and repetition")
    p.add_argument("--concurrency", type=int, default=32, help="the worker's slots")
    files.add_arguments(p, reps=5)
    return p


def codec_us(codec: str, rounds: int = 2000) -> float:
    """µs per job of the codec alone: the call encoded and decoded, the result too."""
    c = echomq.Queue("codec-us", codec=codec).codec
    started = time.perf_counter()
    for _ in range(rounds):
        c.decode_call(c.encode_call("bench.echo", ARGS, {}))
        c.decode_result(c.encode_result(list(ARGS)))
    return (time.perf_counter() - started) / rounds * 1e6


async def jobs_per_s(url: str, codec: str, jobs: int, concurrency: int, rep: int) -> float:
    q = echomq.Queue(f"codecs-{codec}-{rep}", url=url, codec=codec)

    @q.task(name="bench.echo")
    async def echo(*args: Any) -> list[Any]:
        return list(args)

    worker = echomq.Worker(q, concurrency=concurrency, grace=0)
    async with q.open(), trio.open_nursery() as nursery:
        await nursery.start(worker.serve)
        started = time.perf_counter()
        handles = await echo.starmap([ARGS] * jobs)
        last = await handles[-1].result(timeout=300)
        assert last == list(ARGS), last
        for handle in handles[:: max(1, jobs // 50)]:  # a sample: every one finished
            await handle.result(timeout=300)
        elapsed = time.perf_counter() - started
        worker.shutdown()
    return jobs / elapsed


async def run(args: argparse.Namespace) -> Results:
    res = Results()
    with RedisServer() as server:
        for rep in range(args.reps):
            order = CODECS if rep % 2 == 0 else CODECS[::-1]
            for codec in order:
                us = codec_us(codec)
                rate = await jobs_per_s(server.url, codec, args.jobs, args.concurrency, rep)
                res.add(f"{codec} codec µs per job", us, "µs")
                res.add(f"{codec} jobs/s end to end", rate, "jobs/s")
                res.samples.append({"codec": codec, "rep": rep, "codec_us": us, "jobs_per_s": rate})
                machine.log(f"rep {rep + 1} {codec}: {rate:,.0f} jobs/s, codec {us:.1f} µs/job")
    return res


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    meta = machine.describe("codecs", argv)
    res = trio.run(run, args)
    res.meta = machine.finish(meta)
    print(res.table("codecs: JSON and msgpack on a typed payload"), flush=True)
    files.save("codecs", res.to_json(), args)


def readme(doc: dict[str, Any], source: str) -> str:
    """The README's table: each codec per repetition, and msgpack's ratios to JSON."""
    by = {(s["codec"], s["rep"]): s for s in doc["samples"]}
    reps = sorted({s["rep"] for s in doc["samples"]})
    lines = [
        tables.conditions(doc["meta"], reps=len(reps), source=source),
        "",
        "| | " + " | ".join(f"rep {r + 1}" for r in reps) + " | median |",
        "|---|" + "---:|" * (len(reps) + 1),
    ]
    rows: list[tuple[str, list[float], str]] = []
    for key, label, fmt in (
        ("jobs_per_s", "jobs/s end to end", ",.0f"),
        ("codec_us", "codec µs per job", ".0f"),
    ):
        for codec in ("json", "msgpack"):
            rows.append((f"{codec} {label}", [by[codec, r][key] for r in reps], fmt))
        ratios = [by["msgpack", r][key] / by["json", r][key] for r in reps]
        rows.append((f"{label}, msgpack / json", ratios, ".2f"))
    for label, values, fmt in rows:
        cells = " | ".join(format(v, fmt) for v in values)
        lines.append(f"| {label} | {cells} | **{format(statistics.median(values), fmt)}** |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
