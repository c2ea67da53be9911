"""echomq.sync: the blocking producer on redis-py, over the same builders as the verbs."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest
import trio

import echomq
import echomq.sync
from echomq import jobs
from echomq._scripts.keyspace import Keyspace
from echomq.config import parse_url
from echomq.errors import ConnectionLost, DuplicateJob, InvalidArgument, InvalidKey
from echomq.testing import RedisServer


@pytest.fixture
def mq(redis_url: str) -> Iterator[echomq.sync.SyncConnection]:
    with echomq.sync.connect(redis_url) as producer:
        yield producer


def test_enqueue_and_get_job(mq: echomq.sync.SyncConnection, queue: str) -> None:
    """A blocking enqueue writes the row that get_job reads back."""
    job_id = mq.enqueue(queue, b"payload", priority=3, max_attempts=2)
    info = mq.get_job(queue, job_id)
    assert info is not None
    assert (info.id, info.state, info.payload) == (job_id, echomq.JobState.PENDING, b"payload")
    assert (info.priority, info.max_attempts) == (3, 2)
    assert mq.get_job(queue, "nobody") is None


def test_enqueue_many_and_delay(mq: echomq.sync.SyncConnection, queue: str) -> None:
    """enqueue_many answers ids in order; a delayed job is scheduled."""
    ids = mq.enqueue_many(
        queue,
        [
            echomq.sync.NewJob(payload=b"a", job_id="s-1"),
            echomq.sync.NewJob(payload="b", delay_ms=9_000),
        ],
    )
    assert ids[0] == "s-1"
    later = mq.get_job(queue, ids[1])
    assert later is not None and later.state is echomq.JobState.SCHEDULED


def test_duplicate_id_raises_the_same_error(mq: echomq.sync.SyncConnection, queue: str) -> None:
    """A duplicate id raises DuplicateJob through the shared reply table."""
    mq.enqueue(queue, b"", job_id="once")
    with pytest.raises(DuplicateJob):
        mq.enqueue(queue, b"", job_id="once")


def test_dedup_keys_answer_the_holder(mq: echomq.sync.SyncConnection, queue: str) -> None:
    """docs/repeat.md: the blocking producer honours dedup windows per item too."""
    first, second, other = mq.enqueue_many(
        queue,
        [
            jobs.NewJob(payload=b"1", dedup="k", dedup_ms=60_000),
            jobs.NewJob(payload=b"2", dedup="k", dedup_ms=60_000),
            jobs.NewJob(payload=b"3", dedup="j", dedup_ms=60_000),
        ],
    )
    assert second == first != other
    assert mq.enqueue_many(queue, [jobs.NewJob(payload=b"4", dedup="j", dedup_ms=1)]) == [other]


def test_script_is_loaded_after_a_script_flush(mq: echomq.sync.SyncConnection, queue: str) -> None:
    """On NOSCRIPT the script is sent once with EVAL, then EVALSHA works again."""
    mq.client.script_flush()
    job_id = mq.enqueue(queue, b"")
    assert mq.get_job(queue, job_id) is not None


def test_bad_input_raises_before_any_io(closed_port_url: str) -> None:
    """The sync producer gates like the verbs: typed errors, not ConnectionLost."""
    with echomq.sync.connect(closed_port_url) as mq:
        with pytest.raises(InvalidKey):
            mq.enqueue("bad queue", b"")
        with pytest.raises(InvalidKey):
            mq.get_job("q", "bad id")
        with pytest.raises(InvalidArgument):
            mq.enqueue("q", b"", priority=5000)
        with pytest.raises(ConnectionLost):
            mq.enqueue("q", b"")
        with pytest.raises(ConnectionLost):
            mq.get_job("q", "j")


def test_ssl_context_object_is_refused() -> None:
    """redis-py takes no SSLContext: a config carrying one is refused up front."""
    import ssl

    config = parse_url("rediss://127.0.0.1:1/0", ssl_context=ssl.create_default_context())
    with pytest.raises(InvalidArgument):
        echomq.sync.connect(config)


def test_acl_user_and_db_from_the_url(redis_server: RedisServer, queue: str) -> None:
    """username:password@ logs in as an ACL user; /db selects the database."""
    admin = echomq.sync.connect(redis_server.url).client
    user = f"u-{queue}"
    admin.execute_command("ACL", "SETUSER", user, "on", ">s3cret", "~*", "&*", "+@all")
    try:
        url = f"redis://{user}:s3cret@127.0.0.1:{redis_server.port}/3"
        with echomq.sync.connect(url) as mq:
            job_id = mq.enqueue(queue, b"x")
            assert mq.client.execute_command("ACL", "WHOAMI") == user.encode()
        key = Keyspace(queue).job(job_id)
        assert admin.exists(key) == 0
        admin.execute_command("SELECT", 3)
        assert admin.exists(key) == 1
        with pytest.raises(echomq.errors.AuthenticationError):
            echomq.sync.connect(f"redis://{user}:wrong@127.0.0.1:{redis_server.port}/0").enqueue(
                queue, b""
            )
    finally:
        admin.execute_command("ACL", "DELUSER", user)
        admin.close()


def test_unix_socket_url(queue: str) -> None:
    """unix:///path?db=N reaches a server on its unix socket."""
    with tempfile.TemporaryDirectory() as tmp:
        sock = os.path.join(tmp, "redis.sock")
        with RedisServer(extra_args=["--unixsocket", sock, "--unixsocketperm", "700"]):
            with echomq.sync.connect(f"unix://{sock}?db=2") as mq:
                job_id = mq.enqueue(queue, b"over a socket")
                info = mq.get_job(queue, job_id)
                assert info is not None and info.payload == b"over a socket"
                assert mq.client.connection_pool.connection_kwargs["db"] == 2


def test_tls_url(queue: str) -> None:
    """rediss:// with ssl_ca_certs verifies the server and works end to end."""
    with RedisServer(tls=True) as server:
        with echomq.sync.connect(server.url) as mq:
            job_id = mq.enqueue(queue, b"secret")
            info = mq.get_job(queue, job_id)
            assert info is not None and info.payload == b"secret"
        # without the CA the certificate is not trusted: TLSError, nothing replayed
        plain = server.url.split("?")[0]
        with pytest.raises(echomq.errors.TLSError):
            echomq.sync.connect(plain).enqueue(queue, b"")


async def test_sync_producer_and_trio_worker_interoperate(
    redis_url: str, conn: echomq.Connection, queue: str
) -> None:
    """Sync enqueue, trio claim and complete, then sync get_job sees the result."""
    with echomq.sync.connect(redis_url) as mq:
        job_id = await trio.to_thread.run_sync(mq.enqueue, queue, b"from sync")
        [held] = await jobs.claim(conn, queue, 5_000)
        assert (held.id, held.payload, held.token) == (job_id, b"from sync", 1)
        await jobs.complete(conn, queue, job_id, held.token, b"from trio")
        info = await trio.to_thread.run_sync(mq.get_job, queue, job_id)
    assert info is not None
    assert info.state is echomq.JobState.COMPLETED
    assert (info.result, info.token) == (b"from trio", 1)
