"""The tasks of the FastAPI example (docs/asyncio.md): a queue and two tasks.

The queue's URL is ``$ECHOMQ_URL`` (default ``redis://127.0.0.1:6379/0``); a
``redis+cluster://host:port`` URL works the same. Run a worker for it with::

    echomq worker tasks:queue
"""

from __future__ import annotations

import trio

import echomq

queue = echomq.Queue("fastapi-example")


@queue.task(max_attempts=3, timeout=30)
async def add(a: int, b: int) -> int:
    """Add two numbers (on the worker)."""
    return a + b


@queue.task
async def slow_upper(text: str, seconds: float = 0.1) -> str:
    """Upper-case ``text`` after ``seconds`` of pretend work."""
    await trio.sleep(seconds)
    return text.upper()
