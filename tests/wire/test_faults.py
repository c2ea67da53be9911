"""Faults on the wire: a killed server, an outage, cancellation, and transient replies."""

from __future__ import annotations

import uuid

import pytest
import trio
import trio.testing

import echomq
from _waits import until
from echomq.errors import ConnectionLost, ServerError
from echomq.testing import RedisServer, drop_redis, freeze_redis, restart_redis


async def _errorstat(conn: echomq.Connection, name: str) -> int:
    """How many ``name`` error replies the server has sent (INFO errorstats)."""
    info = (await conn.execute("INFO", "errorstats")).decode()
    for line in info.splitlines():
        if line.startswith(f"errorstat_{name}:count="):
            return int(line.split("=", 1)[1])
    return 0


async def test_killed_server_fails_commands_in_flight_then_connection_recovers(
    own_server: RedisServer,
) -> None:
    """A crash mid-flight: waiting commands get ConnectionLost; restarted, the conn works."""
    async with echomq.connect(own_server.url, connect_timeout=5) as conn:
        await conn.execute("PING")
        outcomes: list[str] = []

        async def waiting(i: int) -> None:
            try:
                await conn.execute("BLPOP", f"never:{i}", 30)
                outcomes.append("reply")
            except ConnectionLost:
                outcomes.append("lost")

        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                for i in range(50):
                    nursery.start_soon(waiting, i)
                await trio.testing.wait_all_tasks_blocked()
                await restart_redis(own_server)  # SIGKILL, then up again on its port
        assert outcomes == ["lost"] * 50

        with trio.fail_after(5):
            assert await conn.execute("PING") == b"PONG"
            assert await conn.execute("SET", "after", "restart") == b"OK"
        assert conn.reconnects == 1


async def test_kill_under_load_ends_every_caller_with_a_reply_or_connection_lost(
    own_server: RedisServer,
) -> None:
    """500 busy callers while the server dies: each ends with ConnectionLost, no stray reply."""
    async with echomq.connect(own_server.url, connect_timeout=0.3) as conn:
        await conn.execute("PING")
        ended: list[BaseException] = []
        counts = [0] * 500
        loaded, all_ended = trio.Event(), trio.Event()

        async def busy(i: int) -> None:
            try:
                while True:
                    reply = await conn.execute("INCR", f"load:{i}")
                    assert reply == counts[i] + 1  # its own counter, in order
                    counts[i] = reply
                    if reply == 2:
                        loaded.set()  # (any caller's second reply: the load is on)
            except ConnectionLost as exc:
                ended.append(exc)
                if len(ended) == 500:
                    all_ended.set()

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                for i in range(500):
                    nursery.start_soon(busy, i)
                await loaded.wait()
                async with drop_redis(own_server):
                    await all_ended.wait()
        assert len(ended) == 500
        assert sum(counts) > 0


async def test_commands_during_an_outage_fail_after_connect_timeout_and_share_one_attempt(
    own_server: RedisServer,
) -> None:
    """Server down: 40 callers fail with ConnectionLost after one shared backoff, not one each."""
    async with echomq.connect(own_server.url, connect_timeout=0.3) as conn:
        await conn.execute("PING")
        failures: list[ConnectionLost] = []

        async def call() -> None:
            try:
                await conn.execute("PING")
            except ConnectionLost as exc:
                failures.append(exc)

        async with drop_redis(own_server):
            with trio.fail_after(3):  # 40 callers x 0.3 s each would be 12 s
                async with trio.open_nursery() as nursery:
                    for _ in range(40):
                        nursery.start_soon(call)
        assert len(failures) == 40
        assert any("cannot connect" in str(exc) for exc in failures)


async def test_connect_to_closed_port_is_connection_lost(closed_port_url: str) -> None:
    """Nothing listening: ConnectionLost once connect_timeout (with backoff) has run out."""
    async with echomq.connect(closed_port_url) as conn:
        with trio.fail_after(3), pytest.raises(ConnectionLost, match="cannot connect"):
            await conn.execute("PING")


async def test_cancelled_before_written_is_never_sent(own_server: RedisServer) -> None:
    """A call queued behind a stalled write and cancelled there never reaches the server."""
    key = f"cancel:{uuid.uuid4().hex}"
    big = b"x" * (32 << 20)  # more than the socket buffers hold: the writer blocks
    async with echomq.connect(own_server.url) as conn:
        await conn.execute("PING")

        async def incr(*, task_status: trio.TaskStatus[trio.CancelScope]) -> None:
            with trio.CancelScope() as scope:
                task_status.started(scope)
                await conn.execute("INCR", key)

        big_reply: list[object] = []

        async def set_big() -> None:
            big_reply.append(await conn.execute("SET", f"{key}:big", big))

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                with freeze_redis(own_server):
                    nursery.start_soon(set_big)
                    await trio.testing.wait_all_tasks_blocked()  # the big write is stuck
                    scope = await nursery.start(incr)
                    await trio.testing.wait_all_tasks_blocked()  # INCR is queued behind it
                    scope.cancel()
                    await trio.testing.wait_all_tasks_blocked()
            assert big_reply == [b"OK"]
            assert await conn.execute("GET", key) is None  # INCR never ran
            assert await conn.execute("INCR", key) == 1  # and the wire is in step


async def test_cancelled_before_the_call_sends_nothing(conn: echomq.Connection, queue: str) -> None:
    """A call made inside an already-cancelled scope raises Cancelled and sends nothing."""
    with trio.CancelScope() as scope:
        scope.cancel()
        await conn.execute("INCR", queue)
    assert scope.cancelled_caught
    assert await conn.execute("GET", queue) is None


async def test_callers_in_cancelled_scopes_send_nothing_among_a_burst(
    conn: echomq.Connection, queue: str
) -> None:
    """100 callers in one tick (the queue is written in chunks of 32 by the callers that
    fill it, and by the writer task): the ones already cancelled raise and send nothing,
    in whatever order the tick runs them; the others get their own replies."""
    await conn.execute("PING")  # connected: the burst queues behind nothing
    replies: dict[int, object] = {}

    async def caller(i: int) -> None:
        with trio.CancelScope() as scope:
            if i % 3 == 0:
                scope.cancel()
            replies[i] = await conn.execute("INCR", f"{queue}:{i}")
        if scope.cancelled_caught:
            replies[i] = "cancelled"

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            for i in range(100):
                nursery.start_soon(caller, i)
        counts = await conn.execute("MGET", *(f"{queue}:{i}" for i in range(100)))
    for i in range(100):
        assert replies[i] == ("cancelled" if i % 3 == 0 else 1)
        assert counts[i] == (None if i % 3 == 0 else b"1")


async def test_cancelled_after_written_runs_and_its_reply_is_dropped(
    own_server: RedisServer,
) -> None:
    """A call cancelled while the server holds it still runs; the next caller gets its own reply."""
    key = f"cancel:{uuid.uuid4().hex}"
    async with echomq.connect(own_server.url) as conn:
        await conn.execute("PING")
        with freeze_redis(own_server):
            with trio.move_on_after(0.1) as scope:
                await conn.execute("INCR", key)
            assert scope.cancelled_caught
        with trio.fail_after(5):
            assert await conn.execute("GET", key) == b"1"
            assert await conn.execute("ECHO", b"mine") == b"mine"


async def test_busy_server_is_retried_until_the_script_is_killed(queue: str) -> None:
    """BUSY (a runaway script) is transient: the command is resent and runs after SCRIPT KILL."""
    with RedisServer(extra_args=("--lua-time-limit", "50")) as server:
        async with (
            echomq.connect(server.url) as runner,
            echomq.connect(server.url, connect_timeout=5) as caller,
            echomq.connect(server.url) as admin,
        ):
            await admin.execute("PING")
            await caller.execute("PING")
            results: dict[str, object] = {}

            async def runaway() -> None:
                try:
                    await runner.execute("EVAL", "while true do end", 0)
                except ServerError as exc:
                    results["script"] = str(exc)

            async def write() -> None:
                results["set"] = await caller.execute("SET", queue, "done")

            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(runaway)
                    await until(lambda: _answers_busy(server.url))  # past lua-time-limit
                    nursery.start_soon(write)
                    await trio.testing.wait_all_tasks_blocked(cushion=0.05)  # it backs off
                    assert "set" not in results
                    assert await admin.execute("SCRIPT", "KILL") == b"OK"
            assert results["set"] == b"OK"
            assert "killed" in str(results["script"]).lower()
            assert await caller.execute("GET", queue) == b"done"
            assert await _errorstat(admin, "BUSY") >= 1


async def _answers_busy(url: str) -> bool:
    """Whether the server answers BUSY now (a probe that waits for nothing)."""
    try:
        async with echomq.connect(url, connect_timeout=0.01) as probe:
            await probe.execute("PING")
    except ServerError as exc:
        return str(exc).startswith("BUSY")
    except ConnectionLost:  # no socket within 0.01 s on a loaded machine: ask again
        return False
    return False


async def test_loading_server_is_retried_until_loaded(queue: str) -> None:
    """LOADING (a restart reading its dataset) is transient: GET waits it out and answers."""
    slow_load = ("--key-load-delay", "50", "--loading-process-events-interval-bytes", "1024")
    with RedisServer(extra_args=slow_load) as server:
        async with echomq.connect(server.url, connect_timeout=10) as conn:
            fill = "for i = 1, 5000 do redis.call('SET', KEYS[1] .. ':' .. i, i) end"
            await conn.execute("EVAL", fill, 1, queue)
            await conn.execute("SET", queue, "kept")
            await conn.execute("SAVE")
            await trio.to_thread.run_sync(server.kill)
            with trio.fail_after(20):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(trio.to_thread.run_sync, server.restart)
                    while True:  # until the wire notices the kill; never replayed
                        try:
                            value = await conn.execute("GET", queue)
                            break
                        except ConnectionLost:
                            await trio.sleep(0.01)
            assert value == b"kept"
            assert await _errorstat(conn, "LOADING") >= 1


async def test_error_words_that_start_like_transient_ones_are_not_retried(
    conn: echomq.Connection, queue: str
) -> None:
    """BUSYGROUP is an answer, not BUSY: it raises at once."""
    await conn.execute("XGROUP", "CREATE", queue, "g", "$", "MKSTREAM")
    with trio.fail_after(1), pytest.raises(ServerError, match=r"^BUSYGROUP"):
        await conn.execute("XGROUP", "CREATE", queue, "g", "$", "MKSTREAM")


async def test_error_reply_after_a_write_is_not_replayed(
    conn: echomq.Connection, queue: str
) -> None:
    """A script that wrote and then failed ran once: the error is raised, nothing is re-sent."""
    script = "redis.call('INCR', KEYS[1]); return redis.error_reply('ERR after the write')"
    await conn.execute("PING")  # connected: the call below takes the everyday path
    with pytest.raises(ServerError, match="after the write"):
        await conn.execute("EVAL", script, 1, queue)
    assert await conn.execute("GET", queue) == b"1"
