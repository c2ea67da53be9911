"""A FastAPI app that enqueues echomq jobs and awaits their results (docs/asyncio.md).

Run it beside a worker::

    echomq worker tasks:queue &
    uvicorn app:app --port 8000
    curl -X POST 'localhost:8000/add?a=20&b=22'          # {"job": "...", "result": 42}
    curl -X POST 'localhost:8000/upper?text=hi'           # {"job": "..."}  (202, not waited)
    curl 'localhost:8000/jobs/<job>?wait=5'               # its result, once finished
    curl -X DELETE 'localhost:8000/jobs/<job>'            # cancel it

A job's outcome that is not a result is an HTTP status (:func:`outcome_errors`): 404 no
such job (never enqueued, removed, or past its retention), 409 cancelled, 500 dead.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from fastapi import FastAPI, HTTPException
from tasks import add, queue, slow_upper

import echomq


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    # connect at start (a wrong URL fails here, not at the first request); close at exit
    async with queue.aopen():
        yield


app = FastAPI(lifespan=lifespan)


@contextmanager
def outcome_errors(job_id: str) -> Iterator[None]:
    """A job that did not answer a result, as the HTTP answer for it."""
    try:
        yield
    except (echomq.JobGone, echomq.InvalidKey):  # an id that cannot name a job: none
        raise HTTPException(404, f"no job {job_id}") from None
    except echomq.JobCancelled as exc:
        raise HTTPException(409, f"job {job_id} was cancelled: {exc.reason}") from None
    except echomq.NotCancellable:
        raise HTTPException(409, f"job {job_id} has already finished") from None
    except echomq.JobFailed as exc:
        raise HTTPException(500, f"job {job_id} failed: {exc.error}") from None


@app.post("/add")
async def add_and_wait(a: int, b: int) -> dict[str, Any]:
    """Enqueue ``add(a, b)`` and wait for the worker's answer (at most 10 s)."""
    handle = await add.adelay(a, b)
    with outcome_errors(handle.id):
        try:
            result = await handle.aresult(timeout=10)
        except TimeoutError:
            raise HTTPException(504, f"job {handle.id} is still running") from None
    return {"job": handle.id, "result": result}


@app.post("/upper", status_code=202)
async def upper_later(text: str, seconds: float = 0.1) -> dict[str, str]:
    """Enqueue (``seconds`` of pretend work) and answer at once; ``GET /jobs/<id>`` reads
    the result later."""
    handle = await slow_upper.adelay(text, seconds)
    return {"job": handle.id}


@app.get("/jobs/{job_id}")
async def job_result(job_id: str, wait: float = 0.0) -> dict[str, Any]:
    """The job's result, waiting up to ``wait`` seconds for it to finish; a job still on
    its way answers its state."""
    with outcome_errors(job_id):
        handle = queue.handle(job_id)
        if wait <= 0:  # no waiting: the row says whether there is a result to read
            info = await handle.ainfo()
            if info is None:
                raise echomq.JobGone(job_id)
            if info.state not in (echomq.JobState.COMPLETED, echomq.JobState.DEAD):
                return {"job": job_id, "state": info.state.value}
        try:
            result = await handle.aresult(timeout=wait if wait > 0 else 10)
        except TimeoutError:
            info = await handle.ainfo()
            if info is None:
                raise echomq.JobGone(job_id) from None
            return {"job": job_id, "state": info.state.value}
    return {"job": job_id, "state": "completed", "result": result}


@app.delete("/jobs/{job_id}")
async def cancel_job(job_id: str, reason: str = "cancelled over HTTP") -> dict[str, str]:
    """Cancel the job: removed if it had not started, else asked to stop."""
    with outcome_errors(job_id):
        outcome = await queue.handle(job_id).acancel(reason)
    return {"job": job_id, "cancel": outcome.value}
