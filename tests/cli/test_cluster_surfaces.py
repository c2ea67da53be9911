"""The surfaces against a ``redis+cluster://`` URL, run as subprocesses: the worker CLI
serves a queue of the cluster; ``status`` (no queue) and the dashboard (no ``--queue``) find
queues on every master, the dashboard's live events come from each queue's own shard, and
its buttons reach the queue's master. (status/job/drain/obliterate/explain/watch of one
queue run on the cluster in tests/cli/test_cli.py, marked ``both_backends``.)"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import trio
import trio_websocket

import echomq
from _waits import until
from echomq import jobs
from echomq._scripts.keyspace import Keyspace
from echomq._wire.hashslots import key_slot
from echomq.testing import RedisCluster, free_port, open_worker_process

TOKEN = "cluster-token-1"

APP = """
import os
import echomq

queue = echomq.Queue(os.environ["EMQ_TEST_QUEUE"])


@queue.task(name="double")
async def double(n: int) -> int:
    return 2 * n
"""


def queues_on_every_master(cluster: RedisCluster) -> list[str]:
    """One fresh queue name per master (by the slot of its hash tag)."""
    found: dict[int, str] = {}
    while len(found) < len(cluster.masters()):
        name = f"c-{uuid.uuid4().hex[:10]}"
        found.setdefault(cluster.owner(key_slot(Keyspace(name).pending)).port, name)
    return list(found.values())


async def test_the_worker_cli_serves_a_queue_of_the_cluster(
    redis_cluster: RedisCluster, tmp_path: Path
) -> None:
    """Its URL names first a node that is gone (a seed list outlives its nodes): the
    worker's wait for Redis asks the other seeds, as every cluster connection does."""
    queue = f"w-{uuid.uuid4().hex[:10]}"
    url = redis_cluster.url.replace("redis+cluster://", f"redis+cluster://127.0.0.1:{free_port()},")
    (tmp_path / "clusterapp.py").write_text(APP)
    async with echomq.connect(redis_cluster.url) as conn:
        payloads = [json.dumps({"task": "double", "args": [n], "kwargs": {}}) for n in range(20)]
        ids = await jobs.enqueue_many(conn, queue, [jobs.NewJob(payload=p) for p in payloads])
        with trio.fail_after(30):
            async with open_worker_process(
                "clusterapp:queue",
                url=url,
                concurrency=4,
                grace=1,
                env={"EMQ_TEST_QUEUE": queue},
                cwd=tmp_path,
            ) as worker:

                async def all_done() -> bool:
                    done: int = await conn.execute("ZCARD", Keyspace(queue).completed)
                    return done == len(ids)

                await until(all_done, within=25)
                assert await worker.stop() == 0
        results = [(await jobs.get_job(conn, queue, i)) for i in ids]
        assert [json.loads(r.result or b"null") for r in results if r] == [2 * n for n in range(20)]


async def test_status_and_the_dashboard_see_queues_on_every_master(
    redis_cluster: RedisCluster,
) -> None:
    names = queues_on_every_master(redis_cluster)
    env = {**os.environ, "ECHOMQ_URL": redis_cluster.url}
    async with echomq.connect(redis_cluster.url) as conn:
        for name in names:
            await jobs.enqueue(conn, name, b'{"task": "t", "args": [], "kwargs": {}}')
        with trio.fail_after(30):
            status = await trio.run_process(
                [sys.executable, "-m", "echomq", "status", "--json"],
                capture_stdout=True,
                capture_stderr=True,
                env=env,
            )
        listed = {row["queue"]: row for row in json.loads(status.stdout)}
        assert all(listed[name]["pending"] == 1 for name in names)

        command = [sys.executable, "-m", "echomq", "dashboard", "--port", "0", "--token", TOKEN]
        proc = await trio.lowlevel.open_process(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert proc.stdout is not None
        try:
            seen = b""
            with trio.fail_after(15):
                while not (match := re.search(rb"dashboard on http://127\.0\.0\.1:(\d+)/", seen)):
                    seen += await proc.stdout.receive_some(4096)
            url = f"ws://127.0.0.1:{int(match.group(1))}/ws"
            with trio.fail_after(20):
                async with trio_websocket.open_websocket_url(url) as ws:

                    async def next_message(kind: str) -> dict:  # type: ignore[type-arg]
                        while True:
                            message = json.loads(await ws.get_message())
                            if message["type"] == kind:
                                return message  # type: ignore[no-any-return]

                    while True:  # discovery runs at start and then periodically
                        snapshot = await next_message("snapshot")
                        shown = {q["name"]: q for q in snapshot["queues"]}
                        if set(names) <= set(shown):
                            break
                    assert all(shown[name]["counts"]["pending"] == 1 for name in names)
                    # live events from each master's shard (SSUBSCRIBE per queue)
                    sent = {await jobs.enqueue(conn, name, b"{}"): name for name in names}
                    heard: set[str] = set()
                    while not set(sent) <= heard:
                        batch = await next_message("events")
                        heard |= {item["event"].get("job") for item in batch["items"]}
                    # a button reaches the queue's own master
                    pause = {"action": "pause", "queue": names[-1], "token": TOKEN}
                    await ws.send_message(json.dumps({"type": "command", "ref": 1, **pause}))
                    result = await next_message("result")
                    assert result["ok"] is True, result
            assert await conn.execute("HEXISTS", Keyspace(names[-1]).meta, "paused") == 1
            proc.send_signal(signal.SIGINT)
            with trio.fail_after(10):
                assert await proc.wait() == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                with trio.CancelScope(shield=True):
                    await proc.wait()
