"""A FastAPI app that enqueues echomq jobs and awaits their results (docs/asyncio.md).

Run it beside a worker::

    echomq worker tasks:queue &
    uvicorn app:app --port 8000
    curl -X POST 'localhost:8000/add?a=20&b=22'          # {"job": "...", "result": 42}
    curl -X POST 'localhost:8000/upper?text=hi'           # {"job": "..."}  (202, not waited)
    curl 'localhost:8000/jobs/<job>?wait=5'               # its result, once finished
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
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


@app.post("/add")
async def add_and_wait(a: int, b: int) -> dict[str, Any]:
    """Enqueue ``add(a, b)`` and wait for the worker's answer (at most 10 s)."""
    handle = await add.adelay(a, b)
    try:
        result = await handle.aresult(timeout=10)
    except TimeoutError:
        raise HTTPException(504, f"job {handle.id} is still running") from None
    return {"job": handle.id, "result": result}


@app.post("/upper", status_code=202)
async def upper_later(text: str) -> dict[str, str]:
    """Enqueue and answer at once; ``GET /jobs/<id>`` reads the result later."""
    handle = await slow_upper.adelay(text)
    return {"job": handle.id}


@app.get("/jobs/{job_id}")
async def job_result(job_id: str, wait: float = 0.0) -> dict[str, Any]:
    """The job's result, waiting up to ``wait`` seconds for it to finish."""
    handle = queue.handle(job_id)
    if wait <= 0:  # no waiting: the row says whether there is a result to read
        info = await handle.ainfo()
        if info is None:
            raise HTTPException(404, f"no job {job_id}")
        if info.state not in (echomq.JobState.COMPLETED, echomq.JobState.DEAD):
            return {"job": job_id, "state": info.state.value}
    try:
        result = await handle.aresult(timeout=wait if wait > 0 else 10)
    except TimeoutError:
        info = await handle.ainfo()
        return {"job": job_id, "state": info.state.value if info else "unknown"}
    except echomq.JobFailed as exc:
        raise HTTPException(500, f"job {job_id} failed: {exc.error}") from None
    except echomq.JobGone:
        raise HTTPException(404, f"no job {job_id}") from None
    return {"job": job_id, "state": "completed", "result": result}
