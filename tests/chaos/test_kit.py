"""The fault kit's own tools (echomq.testing): FaultProxy, the worker process, the renewal
hook, the Redis faults, and their bad input (typed errors, nothing started)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import trio
import trio.testing

import echomq
from echomq._scripts.keyspace import keyspace
from echomq.errors import ConnectionLost, InvalidArgument
from echomq.testing import (
    FaultProxy,
    RedisServer,
    RedisServerError,
    WorkerProcessError,
    drop_redis,
    freeze_redis,
    freeze_renewal,
    open_fault_proxy,
    open_worker_process,
    restart_redis,
    serve_fault_proxy,
    thaw_renewal,
    wait_running,
)

from ._support import APP, HERE, app_env, until

# -- FaultProxy -------------------------------------------------------------------------------


def test_proxy_bad_input_raises_before_any_io() -> None:
    """Not a redis:// URL with a port, a negative or infinite delay, a bad cut_after."""
    for url in ("unix:///tmp/redis.sock", "http://127.0.0.1:6379", "redis://127.0.0.1"):
        with pytest.raises(InvalidArgument):
            FaultProxy(url)
    for delay in (-0.1, float("inf"), "1", True):
        with pytest.raises(InvalidArgument):
            FaultProxy("redis://127.0.0.1:6379/0", delay=delay)  # type: ignore[arg-type]
    proxy = FaultProxy("redis://127.0.0.1:6379/0")
    with pytest.raises(InvalidArgument):
        proxy.delay = -1  # checked when set, too
    with pytest.raises(InvalidArgument):
        proxy.cut_after(-1)
    with pytest.raises(InvalidArgument):
        proxy.cut_after(10, direction="sideways")  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="not serving"):
        _ = proxy.url


def test_proxy_url_keeps_scheme_credentials_database_and_query() -> None:
    proxy = FaultProxy("rediss://user:pw@localhost:6380/3?ssl_cert_reqs=none")
    proxy.port = 41234  # (as serve() sets it)
    assert proxy.url == "rediss://user:pw@127.0.0.1:41234/3?ssl_cert_reqs=none"


async def test_proxy_forwards_and_cut_ends_commands_in_flight(redis_url: str) -> None:
    """Through the proxy commands work; cut() resets the link: a BLPOP in flight gets
    ConnectionLost, the next command reconnects."""
    async with open_fault_proxy(redis_url) as proxy, echomq.connect(proxy.url) as conn:
        assert await conn.execute("PING") == b"PONG"
        assert proxy.connections == 1
        outcome: list[str] = []

        async def blocked() -> None:
            try:
                await conn.execute("BLPOP", "never", 30)
            except ConnectionLost:
                outcome.append("lost")

        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(blocked)
                await trio.testing.wait_all_tasks_blocked()
                assert await proxy.cut() == 1
            assert outcome == ["lost"]
            assert proxy.connections == 0
            assert await conn.execute("PING") == b"PONG"
            await proxy.wait_connected(1)
        assert proxy.cuts == 1 and proxy.accepted == 2 and conn.reconnects == 1


async def test_refusing_resets_new_connections_for_the_block(redis_url: str) -> None:
    """New connections are reset at once (the client cannot connect); after the block
    they pass; open ones carry on meanwhile."""
    async with (
        open_fault_proxy(redis_url) as proxy,
        echomq.connect(proxy.url) as kept,
        echomq.connect(proxy.url, connect_timeout=0.3) as fresh,
    ):
        assert await kept.execute("PING") == b"PONG"
        with trio.fail_after(5):
            with proxy.refusing():
                with pytest.raises(ConnectionLost):
                    await fresh.execute("PING")
                assert await kept.execute("PING") == b"PONG"
            assert proxy.refused >= 1
            assert await fresh.execute("PING") == b"PONG"


async def test_delay_holds_every_byte_each_way(redis_url: str) -> None:
    """A round trip through a 50 ms proxy takes at least 100 ms; order is kept."""
    async with (
        open_fault_proxy(redis_url, delay=0.05) as proxy,
        echomq.connect(proxy.url) as conn,
    ):
        await conn.execute("PING")
        with trio.fail_after(5):
            start = trio.current_time()
            replies = await _gather(conn, [("ECHO", str(i)) for i in range(20)])
            elapsed = trio.current_time() - start
            assert replies == [str(i).encode() for i in range(20)]
            assert elapsed >= 0.1
            proxy.delay = 0  # changed on the fly
            assert await conn.execute("PING") == b"PONG"


async def _gather(conn: echomq.Connection, commands: list[tuple[str, ...]]) -> list[object]:
    replies: list[object] = [None] * len(commands)

    async def one(i: int) -> None:
        replies[i] = await conn.execute(*commands[i])

    async with trio.open_nursery() as nursery:
        for i in range(len(commands)):
            nursery.start_soon(one, i)
    return replies


async def test_cut_after_drops_the_link_mid_reply(redis_url: str, queue: str) -> None:
    """A reply cut after 10 of its bytes: ConnectionLost, never a half-parsed value; the
    next command reconnects and reads the whole value."""
    value = b"v" * 1000
    async with (
        open_fault_proxy(redis_url) as proxy,
        echomq.connect(proxy.url) as conn,
        echomq.connect(redis_url) as direct,
    ):
        await direct.execute("SET", queue, value)
        await conn.execute("PING")
        proxy.cut_after(10, direction="to_client")
        with trio.fail_after(5):
            with pytest.raises(ConnectionLost):
                await conn.execute("GET", queue)
            assert proxy.cuts == 1
            assert await conn.execute("GET", queue) == value


async def test_cut_after_drops_the_link_mid_request(redis_url: str, queue: str) -> None:
    """A request cut after 5 of its bytes never runs: the server saw half a command."""
    async with (
        open_fault_proxy(redis_url) as proxy,
        echomq.connect(proxy.url) as conn,
        echomq.connect(redis_url) as direct,
    ):
        await conn.execute("PING")
        proxy.cut_after(5, direction="to_redis")
        with trio.fail_after(5):
            with pytest.raises(ConnectionLost):
                await conn.execute("SET", queue, "half")
            assert await direct.execute("GET", queue) is None
            assert await conn.execute("SET", queue, "whole") == b"OK"


async def test_a_proxy_in_front_of_a_dead_redis_refuses(nursery: trio.Nursery) -> None:
    """Nothing behind the proxy: the client sees a failed connect, as without it."""
    with RedisServer() as server:
        proxy: FaultProxy = await nursery.start(serve_fault_proxy, server.url)
        async with drop_redis(server), echomq.connect(proxy.url, connect_timeout=0.3) as conn:
            with trio.fail_after(5), pytest.raises(ConnectionLost):
                await conn.execute("PING")
        assert proxy.refused >= 1


# -- the worker process -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"target": "no-colon"},
        {"concurrency": 0},
        {"recovery": "sometimes"},
        {"recovery_interval": -1},
        {"max_stalled": 0},
        {"grace": -1},
        {"startup_timeout": 0},
    ],
)
async def test_worker_process_bad_options_start_nothing(options: dict[str, object]) -> None:
    target = options.pop("target", APP)
    with pytest.raises(InvalidArgument):
        async with open_worker_process(target, **options):  # type: ignore[arg-type]
            raise AssertionError("started")


async def test_a_worker_that_exits_before_serving_raises_with_its_output(
    redis_url: str, tmp_path: Path
) -> None:
    """A target that cannot be imported: exit 2; the error quotes the worker's own line."""
    log = tmp_path / "w.log"
    with trio.fail_after(20), pytest.raises(WorkerProcessError, match="cannot import"):
        async with open_worker_process("nowhere_at_all:queue", url=redis_url, log_path=log):
            raise AssertionError("it served")
    assert "cannot import 'nowhere_at_all'" in log.read_text()


async def test_a_worker_process_serves_names_its_queue_and_stops_gracefully(
    redis_url: str, queue: str
) -> None:
    with trio.fail_after(20):
        async with open_worker_process(
            APP, url=redis_url, cwd=HERE, env=app_env(queue), grace=0
        ) as worker:
            assert worker.serving and worker.queue == queue
            assert worker.pid == worker.process.pid and worker.returncode is None
        assert worker.returncode == 0
    assert "SIGTERM: shutting down" in worker.output


async def test_without_the_hook_sigusr1_keeps_its_default(redis_url: str, queue: str) -> None:
    """A worker started without ECHOMQ_FAULT_HOOKS installs no handler: SIGUSR1 ends it
    (its default action), so a production worker never freezes its leases by accident."""
    env = {**app_env(queue), "ECHOMQ_FAULT_HOOKS": None}
    with trio.fail_after(20):
        async with open_worker_process(APP, url=redis_url, cwd=HERE, env=env) as worker:
            worker.send_signal(signal.SIGUSR1)
            assert await worker.wait() == -signal.SIGUSR1


async def test_freezing_a_worker_that_does_not_serve_is_refused(
    queue: str, closed_port_url: str
) -> None:
    q = echomq.Queue(queue, url=closed_port_url)
    with pytest.raises(RuntimeError, match="not serving"):
        await freeze_renewal(echomq.Worker(q))
    with trio.fail_after(20):
        async with open_worker_process(
            APP, url=closed_port_url, cwd=HERE, env=app_env(queue), wait_serving=False
        ) as waiting:  # waits for a Redis that is not there
            with pytest.raises(WorkerProcessError, match="not serving"):
                await freeze_renewal(waiting)


async def test_freeze_and_thaw_an_in_process_worker(redis_url: str, queue: str) -> None:
    """The same hook on an echomq.Worker in this process: frozen, the lease lapses;
    thawed, it is renewed; the job completes on its first claim."""
    q = echomq.Queue(queue, url=redis_url)
    go = trio.Event()

    @q.task(lease=0.3)
    async def gated() -> str:
        await go.wait()
        return "done"

    async def lease_left_ms() -> float:
        score = await q.connection.execute("ZSCORE", keyspace(queue).active, handle.id)
        seconds, micros = await q.connection.execute("TIME")
        return float(score) - (int(seconds) * 1000 + int(micros) // 1000)

    async def lapsed() -> bool:
        return await lease_left_ms() < 0

    async def renewed() -> bool:
        return await lease_left_ms() > 0

    worker = echomq.Worker(q, recovery_interval=60)  # no sweep while the lease is lapsed
    with trio.fail_after(20):
        async with q.open(), trio.open_nursery() as nursery:
            await nursery.start(worker.serve)
            handle = await gated.delay()
            info = await wait_running(handle)
            assert info.token == 1
            await freeze_renewal(worker)
            await until(lapsed)
            await thaw_renewal(worker)
            await until(renewed)
            go.set()
            assert await handle.result(timeout=5) == "done"
            worker.shutdown()
    assert worker.statistics().lost == 0


async def test_wait_running_bad_input(redis_url: str, queue: str) -> None:
    q = echomq.Queue(queue, url=redis_url)
    handle = q.handle("some-job")
    for bad in ({"attempt": 0}, {"attempt": True}, {"poll": 0}):
        with pytest.raises(InvalidArgument):
            await wait_running(handle, **bad)  # type: ignore[arg-type]


# -- Redis faults -------------------------------------------------------------------------------


async def test_redis_faults_on_a_server_that_is_not_running() -> None:
    server = RedisServer()
    with pytest.raises(RedisServerError, match="not running"):
        await restart_redis(server)
    with pytest.raises(RedisServerError, match="not running"):
        async with drop_redis(server):
            pass
    with pytest.raises(RedisServerError, match="not running"), freeze_redis(server):
        pass


@pytest.mark.parametrize("appendonly", [False, True], ids=["no-aof", "aof"])
async def test_restart_and_drop_keep_data_only_with_aof(appendonly: bool) -> None:
    """restart_redis: back at once; drop_redis: refused for the block, back after it; the
    data is there again only with AOF."""
    kept = b"kept" if appendonly else None
    with RedisServer(appendonly=appendonly) as server:
        async with echomq.connect(server.url, connect_timeout=0.3) as conn:
            await conn.execute("SET", "k", "kept")
            with trio.fail_after(20):
                await restart_redis(server)
                assert await _after_reconnect(conn, "GET", "k") == kept
                await conn.execute("SET", "k", "kept")
                async with drop_redis(server):
                    with pytest.raises(ConnectionLost):
                        await conn.execute("GET", "k")
                assert await _after_reconnect(conn, "GET", "k") == kept


async def _after_reconnect(conn: echomq.Connection, *command: str) -> object:
    """The command, once the connection got over the crash (the call that met it fails)."""
    try:
        return await conn.execute(*command)
    except ConnectionLost:
        return await conn.execute(*command)


async def test_freeze_redis_holds_replies_until_the_block_ends() -> None:
    with RedisServer() as server:
        async with echomq.connect(server.url) as conn:
            await conn.execute("PING")
            with freeze_redis(server):
                with trio.move_on_after(0.2) as waited:
                    await conn.execute("PING")
                assert waited.cancelled_caught  # no answer while frozen
            with trio.fail_after(5):
                assert await conn.execute("ECHO", "thawed") == b"thawed"
