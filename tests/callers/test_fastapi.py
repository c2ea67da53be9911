"""The FastAPI example of docs/asyncio.md, as a user runs it: ``uvicorn app:app`` and
``echomq worker tasks:queue``, each a process of its own, on one server and on a cluster;
the test is the HTTP client (httpx)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import httpx
import trio

import echomq
from echomq.testing import free_port, open_worker_process, wait_running

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "fastapi"


@asynccontextmanager
async def uvicorn(url: str) -> AsyncIterator[str]:
    """``uvicorn app:app`` in the example's directory; answers its base URL once it serves."""
    port = free_port()
    env = {**os.environ, "ECHOMQ_URL": url, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "uvicorn", "app:app", "--port", str(port)]
    async with trio.open_nursery() as nursery:
        run = partial(
            trio.run_process,
            command,
            cwd=EXAMPLE,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            check=False,
        )
        process = await nursery.start(run)
        output = b""
        try:
            assert process.stdout is not None
            while b"Application startup complete" not in output:
                chunk = await process.stdout.receive_some(4096)
                assert chunk, f"uvicorn exited:\n{output.decode(errors='replace')}"
                output += chunk

            async def drain() -> None:  # keep reading, so its pipe never fills
                assert process.stdout is not None
                while await process.stdout.receive_some(4096):
                    pass

            nursery.start_soon(drain)
            yield f"http://127.0.0.1:{port}"
        finally:
            process.terminate()
            with trio.move_on_after(10):
                await process.wait()
            process.kill()


async def test_fastapi_app_enqueues_and_awaits_a_worker(redis_url: str) -> None:
    """POST /add waits for a real worker process's result; POST /upper answers at once and
    GET /jobs/<id> reads the result later; a job id that never was is a 404."""
    with trio.fail_after(60):
        async with (
            open_worker_process("tasks:queue", url=redis_url, cwd=EXAMPLE, concurrency=8),
            uvicorn(redis_url) as base,
            httpx.AsyncClient(base_url=base, timeout=20) as http,
        ):
            answer = await http.post("/add", params={"a": 20, "b": 22})
            assert answer.status_code == 200, answer.text
            assert answer.json()["result"] == 42
            later = await http.post("/upper", params={"text": "hello"})
            assert later.status_code == 202
            job = later.json()["job"]
            done = await http.get(f"/jobs/{job}", params={"wait": 10})
            assert done.json() == {"job": job, "state": "completed", "result": "HELLO"}
            many = [await http.post("/add", params={"a": i, "b": 1}) for i in range(5)]
            assert [r.json()["result"] for r in many] == [i + 1 for i in range(5)]
            assert (await http.get("/jobs/never-was")).status_code == 404


async def test_fastapi_app_answers_a_cancelled_job_409_and_a_gone_one_404(
    redis_url: str,
) -> None:
    """The outcomes that are not a result, as docs/asyncio.md documents them: a job
    cancelled while it ran is a 409 (waiting or not), cancelling it again too; a job that
    was removed, or never was, is a 404 (waiting or not), and so is an id that cannot name
    a job."""
    example = echomq.Queue("fastapi-example", url=redis_url)  # the test's own look at it
    with trio.fail_after(60):
        async with (
            open_worker_process("tasks:queue", url=redis_url, cwd=EXAMPLE, concurrency=8),
            uvicorn(redis_url) as base,
            httpx.AsyncClient(base_url=base, timeout=20) as http,
            example.open(),
        ):
            job = (await http.post("/upper", params={"text": "x", "seconds": 60})).json()["job"]
            await wait_running(example.handle(job))
            assert (await http.get(f"/jobs/{job}")).json() == {"job": job, "state": "active"}
            cancelled = await http.delete(f"/jobs/{job}", params={"reason": "changed my mind"})
            assert cancelled.json() == {"job": job, "cancel": "signalled"}, cancelled.text
            for params in ({"wait": 10}, {}):
                answer = await http.get(f"/jobs/{job}", params=params)
                assert answer.status_code == 409, (params, answer.text)
                assert "changed my mind" in answer.json()["detail"]
            again = await http.delete(f"/jobs/{job}")
            assert again.status_code == 409 and "already finished" in again.text

            done = (await http.post("/upper", params={"text": "x"})).json()["job"]
            assert (await http.get(f"/jobs/{done}", params={"wait": 10})).status_code == 200
            await echomq.jobs.remove_job(example.connection, example.name, done)
            for job_id in (done, "never-was"):
                for params in ({}, {"wait": 1}):
                    answer = await http.get(f"/jobs/{job_id}", params=params)
                    assert answer.status_code == 404, (job_id, params, answer.text)
            assert (await http.delete("/jobs/never-was")).status_code == 404
            assert (await http.get("/jobs/no{such}id")).status_code == 404
