"""bullmq-py (BullMQ's Python port, PyPI ``bullmq``): a script that runs
``Worker("bench", processor, {"concurrency": 100})`` as its docs show (it has no worker
CLI); completed jobs kept (its default)."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import _common
import redis
from bullmq import Queue, QueueEvents, Worker

NAME = "bench"


async def noop(job: Any, token: str) -> str:
    return "ok"


async def _serve(url: str, concurrency: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    w = Worker(NAME, noop, {"connection": url, "concurrency": concurrency})
    await stop.wait()
    try:  # close() can hang like QueueEvents.close() (bullmq 3.4.4): bounded
        await asyncio.wait_for(w.close(), 5)
    except TimeoutError:
        pass


def worker(args: Any) -> None:
    asyncio.run(_serve(args.url, args.concurrency))


class Client:
    sleep = staticmethod(asyncio.sleep)

    def __init__(self, args: Any) -> None:
        self.url = args.url
        self.sync = redis.Redis.from_url(args.url)

    async def open(self) -> None:
        self.queue = Queue(NAME, {"connection": self.url})
        self.events: QueueEvents | None = None

    async def enqueue_one(self) -> str:
        return str((await self.queue.add("noop", {"payload": _common.PAYLOAD})).id)

    async def enqueue_batch(self, k: int) -> list[str]:
        return list(await asyncio.gather(*(self.enqueue_one() for _ in range(k))))

    async def enqueue_bulk(self, k: int) -> list[str]:
        jobs = [{"name": "noop", "data": {"payload": _common.PAYLOAD}} for _ in range(k)]
        return [str(j.id) for j in await self.queue.addBulk(jobs)]

    async def count_done(self, ids: list[str]) -> int:
        return min(len(ids), int(self.sync.zcard(f"bull:{NAME}:completed")))

    async def done(self, ids: list[str]) -> int:
        key = f"bull:{NAME}:completed"
        return sum(
            sum(s is not None for s in self.sync.zmscore(key, ids[i : i + 5000]))
            for i in range(0, len(ids), 5000)
        )

    async def roundtrip(self) -> None:
        if self.events is None:  # the documented way to await a job: QueueEvents
            self.events = QueueEvents(NAME, {"connection": self.url})
            await asyncio.sleep(0.2)  # let its XREAD start before the first job
        finished = asyncio.get_running_loop().create_future()

        def on_done(*_: Any) -> None:
            if not finished.done():
                finished.set_result(None)

        job = await self.queue.add("noop", {"payload": _common.PAYLOAD})
        self.events.on(f"completed:{job.id}", on_done)
        if not await self.sync_done(str(job.id)):
            await asyncio.wait_for(finished, 30)
        self.events.off(f"completed:{job.id}", on_done)

    async def sync_done(self, job_id: str) -> bool:
        return self.sync.zscore(f"bull:{NAME}:completed", job_id) is not None

    async def close(self) -> None:
        # QueueEvents.close() can hang on its blocked XREAD (bullmq 3.4.4): bounded here;
        # the process exits right after, which closes the sockets
        for closing in ((self.events.close(),) if self.events is not None else ()) + (
            self.queue.close(),
        ):
            try:
                await asyncio.wait_for(closing, 2)
            except TimeoutError:
                pass
