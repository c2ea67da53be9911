"""An ACL refusal (NOPERM) is PermissionDenied, named and never retried as an outage.

Each test takes a user that lacks one permission on a private server: the refusal names
what was sent and what is missing, in one line; ``result()`` raises it instead of reading
again forever; the worker's claim loop stops the worker with it; a helper the worker can
serve without (the outbox relay, the retention sweep) logs it once (no traceback) and
the jobs go on.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator

import pytest
import trio

import echomq
import echomq.sync
from _waits import until
from echomq import jobs
from echomq.errors import PermissionDenied
from echomq.testing import RedisServer

#: everything echomq needs on one server (docs/operations.md has each role's narrower rule)
FULL = ("~emq:*", "&emq:*", "+@all", "-@dangerous", "+info")


@pytest.fixture(scope="module")
def server() -> AsyncIterator[RedisServer]:
    with RedisServer() as server:
        yield server


async def user(server: RedisServer, *rules: str) -> str:
    """A fresh user with ``rules``; answers its URL."""
    name, password = f"u{uuid.uuid4().hex[:8]}", "pw"
    async with echomq.connect(server.url) as conn:
        assert await conn.execute("ACL", "SETUSER", name, "on", f">{password}", *rules) == b"OK"
    return f"redis://{name}:{password}@127.0.0.1:{server.port}/0"


async def test_a_refused_command_names_it_and_the_permission(server: RedisServer) -> None:
    url = await user(server, *FULL, "-xread")
    async with echomq.connect(url) as conn:
        with pytest.raises(PermissionDenied) as caught:
            await conn.execute("XREAD", "COUNT", 1, "STREAMS", "emq:{q}:completions", "0")
        with pytest.raises(PermissionDenied) as key:
            await conn.execute("HGETALL", "other:key")
        [pipelined] = await conn.execute_pipeline([("HGETALL", "other:key")])
    assert caught.value.command == "XREAD" and caught.value.missing == "the command XREAD"
    assert "\n" not in str(caught.value) and '"Redis ACLs"' in str(caught.value)
    assert key.value.command == "HGETALL" and "key" in (key.value.missing or "")
    assert isinstance(pipelined, PermissionDenied) and pipelined.command == "HGETALL"


async def test_a_command_refused_inside_a_script_is_permission_denied(
    server: RedisServer, queue: str
) -> None:
    """Before: Redis 7.0's "ERR The user executing the script can't run this command or
    subcommand" was a plain ServerError, retried by the worker's loops as any error."""
    url = await user(server, *FULL, "-info")  # claim reads the run id with INFO
    async with echomq.connect(url) as conn:
        await jobs.enqueue(conn, queue, b'{"task": "t"}')
        with pytest.raises(PermissionDenied) as caught:
            await jobs.claim(conn, queue, 30_000)
    error = caught.value
    assert error.command == "script claim" and error.missing == "a command the script calls"
    assert " info " in str(error) and "\n" not in str(error)
    with echomq.sync.connect(url) as mq, pytest.raises(PermissionDenied) as sync_caught:
        mq.stats(queue)  # queue_stats reads nothing it lacks: fine
        mq.run(jobs.claim, queue, 30_000)
    assert sync_caught.value.command == "script claim"


async def test_result_raises_a_refused_read_instead_of_reading_again_forever(
    server: RedisServer, queue: str
) -> None:
    """Before: "results of q: NOPERM ...; reading again in 5 s", forever."""
    q = echomq.Queue(queue, url=await user(server, *FULL, "-xread"))

    @q.task(name="t")
    async def t() -> None: ...

    async with q.open():
        handle = await t.delay()  # no worker: the result waits on the stream
        with trio.fail_after(10), pytest.raises(PermissionDenied, match="XREAD"):
            await handle.result()
        with trio.fail_after(10), pytest.raises(PermissionDenied):  # again: a new read
            await handle.result()


async def test_a_worker_whose_claims_are_refused_stops_with_the_refusal(
    server: RedisServer, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: the claim loop crashed and was restarted every few seconds, a traceback each
    time, forever, while the worker looked alive."""
    caplog.set_level(logging.ERROR, logger="echomq.worker")
    q = echomq.Queue(queue, url=await user(server, *FULL, "-info"))

    @q.task(name="t")
    async def t() -> None: ...

    async with echomq.connect(server.url) as conn:
        await jobs.enqueue(conn, queue, b'{"task": "t"}')  # a claim with a job reads INFO
    worker = echomq.Worker(q)
    with trio.fail_after(20), pytest.raises(BaseException) as caught:
        await worker.serve()
    leaf = caught.value
    while isinstance(leaf, BaseExceptionGroup) and len(leaf.exceptions) == 1:
        leaf = leaf.exceptions[0]
    assert isinstance(leaf, PermissionDenied) and leaf.command == "script claim"
    lines = [r for r in caplog.records if "refused" in r.getMessage()]
    assert len(lines) == 1 and "claim loop" in lines[0].getMessage()
    assert lines[0].exc_info is None  # one line, no traceback
    assert worker.statistics().helper_restarts == 0


async def test_a_helper_the_worker_serves_without_is_refused_once_and_jobs_go_on(
    server: RedisServer, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The outbox relay (XAUTOCLAIM) refused at every sweep: one ERROR line naming it
    (before: a warning at every sweep), no traceback; the worker serves its jobs."""
    caplog.set_level(logging.ERROR, logger="echomq.worker")
    q = echomq.Queue(queue, url=await user(server, *FULL, "-xautoclaim"))

    @q.task(name="t")
    async def t(x: int) -> int:
        return 2 * x

    async with echomq.connect(server.url) as conn:  # an outbox entry: the relay reads it
        await conn.execute("XADD", f"emq:{{{queue}}}:outbox", "*", "parent", "p")
    worker = echomq.Worker(q, recovery_interval=0.05)
    with trio.fail_after(20):
        async with q.open(), trio.open_nursery() as nursery:
            await nursery.start(worker.serve)
            for i in range(3):
                assert await (await t.delay(i)).result(timeout=10) == 2 * i
            await trio.sleep(0.5)  # sweeps that would each log a traceback before
            worker.shutdown(grace=1)
    lines = [r for r in caplog.records if "refused" in r.getMessage()]
    assert len(lines) == 1 and "relaying the outbox" in lines[0].getMessage(), lines
    assert "XAUTOCLAIM" in lines[0].getMessage() and lines[0].exc_info is None
    assert worker.statistics().sweeps >= 3 and worker.statistics().helper_restarts == 0


async def test_a_worker_whose_rule_predates_the_retention_sweep_says_so_once(
    server: RedisServer, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The retention sweep reads old completions entries (XRANGE): a rule without it gets
    one ERROR line naming the script, no traceback, no line per tick (EVAL and EVALSHA
    word the refusal differently: it is told apart by what was refused); the jobs go on."""
    caplog.set_level(logging.WARNING, logger="echomq.worker")
    q = echomq.Queue(queue, url=await user(server, *FULL, "-xrange"))

    @q.task(name="t")
    async def t(x: int) -> int:
        return 2 * x

    worker = echomq.Worker(q, recovery_interval=0.05)
    with trio.fail_after(20):
        async with q.open(), trio.open_nursery() as nursery:
            await nursery.start(worker.serve)
            for i in range(3):
                assert await (await t.delay(i)).result(timeout=10) == 2 * i

            async def swept_often() -> bool:
                return worker.statistics().sweeps >= 5

            await until(swept_often)
            worker.shutdown(grace=1)
    lines = [r for r in caplog.records if "retention sweep" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.ERROR, [r.getMessage() for r in lines]
    assert "retention_sweep" in lines[0].getMessage() and lines[0].exc_info is None
    assert worker.statistics().helper_restarts == 0
