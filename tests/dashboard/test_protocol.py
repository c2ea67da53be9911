"""The dashboard's websocket protocol, driven by a trio-websocket client (no browser)."""

from __future__ import annotations

import json

import pytest
import trio
import trio_websocket

import echomq
from echomq import admin, jobs
from echomq.dashboard import DashboardInfo

from ._client import Client, ws_url
from .conftest import TOKEN, payload


async def dead_job(conn: echomq.Connection, queue: str, error: str = "boom") -> str:
    job_id = await jobs.enqueue(conn, queue, payload("demo.fails"), max_attempts=1)
    [claimed] = await jobs.claim(conn, queue, 5000)
    await jobs.add_log(conn, queue, job_id, "about to fail")
    assert await jobs.fail(conn, queue, job_id, claimed.token, error) == "dead"
    return job_id


def view(snapshot: dict, queue: str) -> dict:
    [found] = [q for q in snapshot["queues"] if q["name"] == queue]
    return found


async def test_connect_sends_hello_then_a_snapshot_of_the_queue(
    dashboard: DashboardInfo, conn: echomq.Connection, queue: str
) -> None:
    """A new client gets hello, then a snapshot with the queue's counts by state."""
    for i in range(3):
        await jobs.enqueue(conn, queue, payload("demo.add", i, 1))
    await jobs.enqueue(conn, queue, payload(), delay_ms=60_000)
    async with trio_websocket.open_websocket_url(ws_url(dashboard)) as ws:
        client = Client(ws)
        hello = await client.next("hello")
        assert hello["queues"] == [queue]
        snap = await client.next("snapshot", lambda m: view(m, queue)["counts"]["pending"] == 3)
        counts = view(snap, queue)["counts"]
        assert counts == {"pending": 3, "active": 0, "scheduled": 1, "dead": 0, "completed": 0}
        assert view(snap, queue)["paused"] is False


async def test_snapshots_follow_claims_and_show_the_active_job_with_its_lease(
    dashboard: DashboardInfo, conn: echomq.Connection, queue: str
) -> None:
    """After a claim the next snapshots list the job as active with progress and deadline."""
    job_id = await jobs.enqueue(conn, queue, payload("demo.resize", "cat.png", width=64))
    async with trio_websocket.open_websocket_url(ws_url(dashboard)) as ws:
        client = Client(ws)
        await client.next("snapshot")
        [claimed] = await jobs.claim(conn, queue, 30_000)
        await jobs.update_progress(conn, queue, job_id, 40)
        snap = await client.next("snapshot", lambda m: bool(view(m, queue)["active"]))
        [active] = view(snap, queue)["active"]
        assert active["id"] == job_id
        assert active["task"] == "demo.resize"
        assert active["call"] == 'demo.resize("cat.png", width=64)'
        assert active["progress"] == "40"
        assert active["token"] == claimed.token
        assert snap["now_ms"] < active["lease_deadline_ms"] <= snap["now_ms"] + 30_000


async def test_snapshots_show_per_group_counts(
    dashboard: DashboardInfo, conn: echomq.Connection, queue: str
) -> None:
    """A queue with group lanes shows each group's waiting, active, limit and standing."""
    await admin.ensure_schema(conn, queue)  # the queue exists first
    await admin.set_group_concurrency(conn, queue, 1, group="acme")
    for group in ("acme", "acme", "bob"):
        await jobs.enqueue(conn, queue, payload("demo.add", 1, 2), group=group)
    await jobs.claim(conn, queue, 30_000, count=1)
    async with trio_websocket.open_websocket_url(ws_url(dashboard)) as ws:
        client = Client(ws)
        snap = await client.next("snapshot", lambda m: len(view(m, queue)["groups"]) == 2)
        q = view(snap, queue)
        assert q["groups"] == [
            {"name": "acme", "waiting": 1, "active": 1, "limit": 1, "standing": "limit"},
            {"name": "bob", "waiting": 1, "active": 0, "limit": None, "standing": "turn"},
        ]
        assert q["group_total"] == 2 and q["counts"]["pending"] == 2


async def test_lifecycle_events_arrive_live(
    dashboard: DashboardInfo, conn: echomq.Connection, queue: str
) -> None:
    """Events published by the scripts reach the client in an events batch."""
    async with trio_websocket.open_websocket_url(ws_url(dashboard)) as ws:
        client = Client(ws)
        await client.next("snapshot")
        job_id = await jobs.enqueue(conn, queue, payload())
        batch = await client.next(
            "events", lambda m: any(i["event"].get("job") == job_id for i in m["items"])
        )
        [item] = [i for i in batch["items"] if i["event"]["job"] == job_id]
        assert item == {"queue": queue, "event": {"event": "enqueued", "job": job_id}}


async def test_dead_jobs_carry_last_error_logs_and_show_in_recent_failures(
    dashboard: DashboardInfo, conn: echomq.Connection, queue: str
) -> None:
    """A dead job appears with its error and logs; the failure seen live is listed too."""
    async with trio_websocket.open_websocket_url(ws_url(dashboard)) as ws:
        client = Client(ws)
        await client.next("snapshot")
        job_id = await dead_job(conn, queue, "ValueError: bad input")
        snap = await client.next(
            "snapshot", lambda m: bool(view(m, queue)["dead"] and view(m, queue)["failures"])
        )
        [dead] = view(snap, queue)["dead"]
        assert dead["id"] == job_id
        assert dead["last_error"] == "ValueError: bad input"
        assert dead["logs"] == ["about to fail"]
        assert dead["failures"] == 1
        [failure] = view(snap, queue)["failures"]
        assert (failure["job"], failure["outcome"]) == (job_id, "dead")
        assert view(snap, queue)["totals"]["failed"] == 1


async def test_command_without_token_is_refused_and_changes_nothing(
    dashboard: DashboardInfo, conn: echomq.Connection, queue: str
) -> None:
    """pause with no token, or a wrong one, answers unauthorized; the queue stays unpaused."""
    async with trio_websocket.open_websocket_url(ws_url(dashboard)) as ws:
        client = Client(ws)
        for token in (None, "", "wrong"):
            result = await client.command("pause", queue, token=token)
            assert result["ok"] is False
            assert result["kind"] == "unauthorized"
    assert await admin.is_paused(conn, queue) is False


async def test_pause_and_resume_with_the_token(
    dashboard: DashboardInfo, conn: echomq.Connection, queue: str
) -> None:
    """With the token, pause sets the gate and the next snapshot says paused; resume clears it."""
    await jobs.enqueue(conn, queue, payload())
    async with trio_websocket.open_websocket_url(ws_url(dashboard)) as ws:
        client = Client(ws)
        assert (await client.command("pause", queue, token=TOKEN))["ok"] is True
        assert await admin.is_paused(conn, queue) is True
        await client.next("snapshot", lambda m: view(m, queue)["paused"])
        assert (await client.command("resume", queue, token=TOKEN))["ok"] is True
        assert await admin.is_paused(conn, queue) is False


async def test_reprocess_and_remove_a_dead_job(
    dashboard: DashboardInfo, conn: echomq.Connection, queue: str
) -> None:
    """reprocess moves a dead job to pending; remove deletes its row; a second remove is JobGone."""
    first, second = await dead_job(conn, queue), await dead_job(conn, queue)
    async with trio_websocket.open_websocket_url(ws_url(dashboard)) as ws:
        client = Client(ws)
        assert (await client.command("reprocess", queue, first, token=TOKEN))["ok"] is True
        info = await jobs.get_job(conn, queue, first)
        assert info is not None and info.state is echomq.JobState.PENDING
        assert (await client.command("remove", queue, second, token=TOKEN))["ok"] is True
        assert await jobs.get_job(conn, queue, second) is None
        again = await client.command("remove", queue, second, token=TOKEN)
        assert (again["ok"], again["kind"]) == (False, "JobGone")


async def test_cancel_an_active_job_signals_its_worker(
    dashboard: DashboardInfo, conn: echomq.Connection, queue: str
) -> None:
    """cancel on an active job answers signalled and publishes the cancel event."""
    job_id = await jobs.enqueue(conn, queue, payload())
    await jobs.claim(conn, queue, 30_000)
    async with trio_websocket.open_websocket_url(ws_url(dashboard)) as ws:
        client = Client(ws)
        result = await client.command("cancel", queue, job_id, token=TOKEN)
        assert (result["ok"], result["value"]) == (True, "signalled")
        batch = await client.next(
            "events", lambda m: any(i["event"]["event"] == "cancel" for i in m["items"])
        )
        [item] = [i for i in batch["items"] if i["event"]["event"] == "cancel"]
        assert item["event"]["job"] == job_id


async def test_drain_deletes_the_backlog(
    dashboard: DashboardInfo, conn: echomq.Connection, queue: str
) -> None:
    """drain answers the number of pending jobs deleted."""
    for _ in range(4):
        await jobs.enqueue(conn, queue, payload())
    async with trio_websocket.open_websocket_url(ws_url(dashboard)) as ws:
        result = await Client(ws).command("drain", queue, token=TOKEN)
    assert (result["ok"], result["value"]) == (True, 4)
    assert (await admin.stats(conn, queue)).pending == 0


async def test_auth_message_says_whether_the_token_is_right(dashboard: DashboardInfo) -> None:
    """auth answers ok for the server's token and not for another."""
    async with trio_websocket.open_websocket_url(ws_url(dashboard)) as ws:
        client = Client(ws)
        await client.send(type="auth", token="nope")
        assert (await client.next("auth"))["ok"] is False
        await client.send(type="auth", token=TOKEN)
        assert (await client.next("auth"))["ok"] is True


async def test_logs_request_answers_the_job_log_lines(
    dashboard: DashboardInfo, conn: echomq.Connection, queue: str
) -> None:
    """logs (a read, no token) answers every line in append order."""
    job_id = await jobs.enqueue(conn, queue, payload())
    for line in ("one", "two", "three"):
        await jobs.add_log(conn, queue, job_id, line)
    async with trio_websocket.open_websocket_url(ws_url(dashboard)) as ws:
        client = Client(ws)
        await client.send(type="logs", ref=7, queue=queue, job=job_id)
        result = await client.next("result", lambda m: m["ref"] == 7)
    assert result["value"] == ["one", "two", "three"]


@pytest.mark.parametrize(
    "message",
    [
        "not json",
        "[1, 2]",
        json.dumps({"type": "shout"}),
        json.dumps({"type": "command", "ref": 1, "action": "obliterate", "queue": "q"}),
        json.dumps({"type": "command", "ref": 1, "action": "reprocess", "queue": "q"}),
        json.dumps({"type": "command", "ref": "1", "action": "pause", "queue": "q"}),
    ],
)
async def test_malformed_messages_are_answered_and_the_connection_stays(
    dashboard: DashboardInfo, message: str
) -> None:
    """A bad message gets a bad_message result; the connection keeps working."""
    async with trio_websocket.open_websocket_url(ws_url(dashboard)) as ws:
        client = Client(ws)
        await ws.send_message(message)
        result = await client.next("result")
        assert (result["ok"], result["kind"]) == (False, "bad_message")
        await client.send(type="auth", token=TOKEN)
        assert (await client.next("auth"))["ok"] is True


async def test_invalid_queue_name_in_a_command_is_refused_before_any_io(
    dashboard: DashboardInfo,
) -> None:
    """A queue name the key builder rejects answers invalid."""
    async with trio_websocket.open_websocket_url(ws_url(dashboard)) as ws:
        result = await Client(ws).command("pause", "bad name!", token=TOKEN)
    assert (result["ok"], result["kind"]) == (False, "invalid")


async def handshake_refusals(port: int, origin: str) -> set[int]:
    """Status codes of the rejections a websocket handshake with ``origin`` meets."""
    refusals: set[int] = set()
    # the stream is ours, so it is closed here (open_websocket leaks it on rejection)
    async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
        with trio.fail_after(5):
            try:
                async with trio.open_nursery() as nursery:
                    await trio_websocket.wrap_client_stream(
                        nursery, stream, f"127.0.0.1:{port}", "/ws",
                        extra_headers=[(b"Origin", origin.encode())],
                    )  # fmt: skip
                    nursery.cancel_scope.cancel()
            except* trio_websocket.ConnectionRejected as group:
                refusals |= {e.status_code for e in group.exceptions}  # type: ignore[attr-defined]
    return refusals


async def test_foreign_origin_is_refused(dashboard: DashboardInfo) -> None:
    """A handshake from another site's page (foreign Origin) is refused with 403."""
    for origin in ("http://evil.example", f"http://evil.example:{dashboard.port}",
                   "http://127.0.0.1:1", "null"):  # fmt: skip
        assert await handshake_refusals(dashboard.port, origin) == {403}


async def test_own_origin_is_accepted(dashboard: DashboardInfo) -> None:
    """The page's own origins (127.0.0.1 and localhost on this port) may connect."""
    for name in ("127.0.0.1", "localhost"):
        origin = f"http://{name}:{dashboard.port}".encode()
        async with trio_websocket.open_websocket(
            "127.0.0.1", dashboard.port, "/ws", use_ssl=False, extra_headers=[(b"Origin", origin)]
        ) as ws:
            assert (await Client(ws).next("hello"))["type"] == "hello"


async def test_bad_arguments_raise_before_any_io(closed_port_url: str) -> None:
    """A bad queue name, interval or empty token raises at once, even with no Redis."""
    from echomq.dashboard import serve_dashboard
    from echomq.errors import InvalidArgument, InvalidKey

    with pytest.raises(InvalidKey):
        await serve_dashboard(closed_port_url, queues=["bad name!"])
    with pytest.raises(InvalidArgument):
        await serve_dashboard(closed_port_url, interval=0)
    with pytest.raises(InvalidArgument):
        await serve_dashboard(closed_port_url, token="")


async def test_unreachable_redis_fails_the_start_with_connection_lost(
    closed_port_url: str, nursery: trio.Nursery
) -> None:
    """With no Redis at the URL, starting the dashboard raises ConnectionLost."""
    from echomq.dashboard import serve_dashboard
    from echomq.errors import ConnectionLost

    with trio.fail_after(10), pytest.RaisesGroup(ConnectionLost, flatten_subgroups=True):
        await nursery.start(serve_dashboard, closed_port_url)


async def test_redis_outage_is_reported_and_the_dashboard_recovers(
    nursery: trio.Nursery,
) -> None:
    """A killed Redis turns status to not ok (the server lives); back up, status is ok again."""
    from echomq.dashboard import serve_dashboard
    from echomq.testing import RedisServer, drop_redis

    with RedisServer() as server:
        url = server.url + "?connect_timeout=0.5"
        async with echomq.connect(url) as conn:
            await jobs.enqueue(conn, "outage", payload())
            info: DashboardInfo = await nursery.start(
                lambda task_status: serve_dashboard(
                    url, queues=["outage"], interval=0.1, task_status=task_status
                )
            )
            async with trio_websocket.open_websocket_url(ws_url(info)) as ws:
                client = Client(ws)
                await client.next("snapshot")
                async with drop_redis(server):
                    down = await client.next("status", lambda m: not m["ok"])
                    assert down["error"]
                await client.next("status", lambda m: m["ok"])
                snap = await client.next("snapshot")
                assert view(snap, "outage")["counts"]["pending"] == 0  # no persistence
        nursery.cancel_scope.cancel()


DEEP_CALL = b'{"task":"deep","args":[' + b"[" * 5_000 + b"]" * 5_000 + b"]}"
GARBAGE = b"\xff\xfe\x80garbage"


async def test_undecodable_payloads_show_raw_and_the_dashboard_lives(
    dashboard: DashboardInfo, conn: echomq.Connection, queue: str
) -> None:
    """A payload nested too deeply or not UTF-8 shows as a raw preview; snapshots go on."""
    async with trio_websocket.open_websocket_url(ws_url(dashboard)) as ws:
        client = Client(ws)
        await client.next("snapshot")
        ids = [await jobs.enqueue(conn, queue, raw) for raw in (DEEP_CALL, GARBAGE)]
        claimed = await jobs.claim(conn, queue, 30_000, count=2)
        await jobs.fail(conn, queue, claimed[0].id, claimed[0].token, "poison", dead=True)
        await conn.execute("HSET", f"emq:{{{queue}}}:job:{claimed[1].id}", "progress", GARBAGE)
        await conn.execute("PUBLISH", f"emq:{{{queue}}}:events", b"[" * 5_000 + b"]" * 5_000)
        snap = await client.next(
            "snapshot", lambda m: bool(view(m, queue)["dead"] and view(m, queue)["active"])
        )
        [dead], [active] = view(snap, queue)["dead"], view(snap, queue)["active"]
        later = await jobs.enqueue(conn, queue, payload("demo.after"))
        await client.next("snapshot", lambda m: view(m, queue)["counts"]["pending"] == 1)
    shown = {dead["id"]: dead, active["id"]: active}
    deep, garbage = shown[ids[0]], shown[ids[1]]
    assert deep["task"] == "?" and deep["call"].startswith('{"task":"deep","args":[[[[')
    assert garbage["task"] == "?" and garbage["call"].startswith("\\xff\\xfe\\x80garbage")
    assert later


async def test_snapshots_count_by_the_minute_whatever_is_retained(
    dashboard: DashboardInfo, conn: echomq.Connection, queue: str
) -> None:
    """per_minute (60 minutes by outcome) comes from the per-minute counters: jobs whose
    rows are not kept are counted too; hello says there is no archive."""
    for _ in range(3):
        await jobs.enqueue_many(conn, queue, [jobs.NewJob(payload=payload(), keep_result_ms=0)])
        [held] = await jobs.claim(conn, queue, 5000)
        await jobs.complete(conn, queue, held.id, held.token, b"1")
    await dead_job(conn, queue)
    async with trio_websocket.open_websocket_url(ws_url(dashboard)) as ws:
        client = Client(ws)
        hello = await client.next("hello")
        snap = await client.next(
            "snapshot", lambda m: sum(view(m, queue)["per_minute"]["dead"]) == 1
        )
    per = view(snap, queue)["per_minute"]
    assert {name: len(series) for name, series in per.items()} == {
        "completed": 60, "dead": 60, "cancelled": 60,
    }  # fmt: skip
    assert (sum(per["completed"]), sum(per["dead"]), sum(per["cancelled"])) == (3, 1, 0)
    assert view(snap, queue)["counts"]["completed"] == 0  # nothing retained
    assert view(snap, queue)["capped"] == 0
    assert hello["archive"] is None


@pytest.mark.parametrize(
    "message, kind",
    [
        ({"type": "history", "ref": 1, "queue": "QUEUE"}, "no_archive"),
        ({"type": "history", "ref": 1, "queue": "QUEUE", "limit": 0}, "bad_message"),
        ({"type": "history", "ref": 1, "queue": "QUEUE", "state": "lost"}, "bad_message"),
        ({"type": "history", "ref": "1", "queue": "QUEUE"}, "bad_message"),
    ],
)
async def test_history_requests_are_checked_and_need_an_archive(
    dashboard: DashboardInfo, queue: str, message: dict, kind: str
) -> None:
    """A history request to a dashboard with no archive, or a malformed one, is refused."""
    async with trio_websocket.open_websocket_url(ws_url(dashboard)) as ws:
        client = Client(ws)
        await client.send(**{k: (queue if v == "QUEUE" else v) for k, v in message.items()})
        reply = await client.next("result")
    assert (reply["ok"], reply["kind"]) == (False, kind)


async def test_snapshots_show_repeatables_with_their_upcoming_runs(
    dashboard: DashboardInfo, conn: echomq.Connection, queue: str
) -> None:
    """docs/repeat.md: the dashboard lists each repeatable's next runs (none while paused)."""
    from echomq import repeat

    await repeat.add(
        conn,
        queue,
        "nightly",
        task="demo.report",
        payload=payload("demo.report"),
        schedule=repeat.Schedule.of(cron="30 2 * * *", tz="Europe/Berlin"),
    )
    await repeat.add(
        conn, queue, "held", task="demo.t", payload=payload(), schedule=repeat.Schedule.of(every=9)
    )
    await repeat.pause(conn, queue, "held")
    async with trio_websocket.open_websocket_url(ws_url(dashboard)) as ws:
        client = Client(ws)
        snap = await client.next("snapshot", lambda m: len(view(m, queue)["repeats"]) == 2)
        nightly, held = view(snap, queue)["repeats"]
        assert (nightly["key"], nightly["task"]) == ("nightly", "demo.report")
        assert nightly["schedule"] == "cron 30 2 * * * (Europe/Berlin)"
        assert len(nightly["upcoming_ms"]) == 3
        assert snap["now_ms"] < nightly["upcoming_ms"][0] < nightly["upcoming_ms"][1]
        assert (held["paused"], held["upcoming_ms"]) == (True, [])
