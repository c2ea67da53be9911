"""A producer stopped between the pages of a big flow (docs/flows.md "Held roots"): its
root was named before the first page, so the held root it leaves is listed (``echomq flows
QUEUE --held``: id, age, pages written) and removed with its flow (``--remove-held``). On one
server and on the cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
import trio

import echomq
from echomq import flows, jobs
from echomq._scripts.calls import SCRIPTS
from echomq._scripts.keyspace import Keyspace
from echomq.errors import FlowStateError

from ._app import make_app

ADD_FLOW = {
    form
    for v in (False, True)
    for form in (SCRIPTS["add_flow"].variant(v).sha, SCRIPTS["add_flow"].variant(v).source)
}


class StopsAtPage:
    """The producer's connection: page ``stop`` (0-based) of ``add_flow`` never gets
    sent; the producer waits there until its task is cancelled."""

    def __init__(self, conn: Any, stop: int) -> None:
        self.conn, self.stop, self.pages = conn, stop, 0
        self.waiting = trio.Event()

    async def execute(self, *args: Any) -> Any:
        if args and args[0] in ("EVALSHA", "EVAL") and str(args[1]) in ADD_FLOW:
            if self.pages == self.stop:
                self.waiting.set()
                await trio.sleep_forever()
            reply = await self.conn.execute(*args)  # (a NOSCRIPT is no page: sent again)
            self.pages += 1
            return reply
        return await self.conn.execute(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


async def cli(url: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "ECHOMQ_URL": url}
    with trio.fail_after(60):
        return await trio.run_process(
            [sys.executable, "-m", "echomq", *args],
            capture_stdout=True, capture_stderr=True, check=False, env=env,
        )  # fmt: skip


async def test_a_flow_stopped_between_pages_is_listed_and_removed(
    redis_url: str, queue: str
) -> None:
    q, t = make_app(queue, redis_url)
    async with q.open():
        conn = q.connection
        canvas = echomq.chord([t["add"].s(i) for i in range(600)], t["total"].s())
        roots = canvas.flow_jobs()
        root = roots[0].id  # named before any page is sent
        producer = StopsAtPage(conn, stop=1)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(flows.add_flow, producer, roots)
            with trio.fail_after(30):
                await producer.waiting.wait()  # page 1 written, page 2 never sent
            nursery.cancel_scope.cancel()  # the producer's task is cancelled
        [held] = await flows.held_roots(conn, queue)
        assert (held.id, held.pages, held.kids) == (root, 1, 249)
        assert held.age_ms >= 0
        listed = await cli(redis_url, "flows", queue, "--held", "--json")
        assert listed.returncode == 0, listed.stderr
        [row] = json.loads(listed.stdout)
        assert (row["id"], row["pages"], row["kids"]) == (root, 1, 249)
        text = await cli(redis_url, "flows", queue, "--held")
        assert root in text.stdout.decode() and b"--remove-held" in text.stdout
        # a job that is not a held root is refused (nothing removed)
        child = (await flows.children(conn, queue, root)).ids[0]
        with pytest.raises(FlowStateError):
            await flows.remove_held(conn, queue, child)
        refused = await cli(redis_url, "flows", queue, "--remove-held", child)
        assert refused.returncode == 1 and b"not a held flow root" in refused.stderr
        removed = await cli(redis_url, "flows", queue, "--remove-held", root)
        assert removed.returncode == 0, removed.stderr
        assert b"250 job(s)" in removed.stdout
        assert await flows.held_roots(conn, queue) == []
        ks = Keyspace(queue)
        assert await conn.execute("ZCARD", ks.pending) == 0
        assert await conn.execute("ZCARD", ks.waiting) == 0
        assert await jobs.get_job(conn, queue, root) is None


async def test_a_flow_of_one_page_is_never_held(redis_url: str, queue: str) -> None:
    q, t = make_app(queue, redis_url)
    async with q.open():
        await echomq.chord([t["add"].s(i) for i in range(10)], t["total"].s()).apply()
        assert await flows.held_roots(q.connection, queue) == []
        assert await flows.waiting_parents(q.connection, queue) != []
