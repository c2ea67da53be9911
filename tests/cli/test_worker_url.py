"""Which Redis a worker dials: ``--url``, else the queue's own ``Queue(url=...)``, else
``$ECHOMQ_URL``, else redis://127.0.0.1:6379/0 (``echomq worker``, run as ``python -m
echomq worker``): the rule producers follow too (``config.resolve_url``; the other
surfaces are in tests/test_url_rule.py). Run as subprocesses; the worker names the server
it serves (or waits for) in its log."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
import trio

from echomq.config import parse_url
from echomq.testing import free_port, open_worker_process

APP = """
import os
import echomq

queue = echomq.Queue(os.environ["EMQ_TEST_QUEUE"], url=os.environ.get("EMQ_QUEUE_URL"))


@queue.task(name="noop")
async def noop() -> None:
    return None
"""

ENTRIES = {  # before the global flags and "worker"
    "echomq worker": ["-m", "echomq"],  # the one front end (docs/operations.md)
}


async def _dialled(
    tmp_path: Path,
    queue: str,
    entry: str,
    *,
    queue_url: str | None,
    env_url: str | None,
    flag_url: str | None,
    expect: str,
    leading: Sequence[str] = (),
) -> str:
    """Start the worker, wait until its log names ``expect``'s address; answer the log."""
    (tmp_path / "urlapp.py").write_text(APP)
    env: dict[str, str | None] = {
        "ECHOMQ_URL": env_url,  # None: unset
        "EMQ_TEST_QUEUE": queue,
        "EMQ_QUEUE_URL": queue_url,
    }
    display = parse_url(expect).display
    with trio.fail_after(20):
        async with open_worker_process(
            "urlapp:queue",
            url=flag_url,
            grace=0,
            env=env,
            cwd=tmp_path,
            entry=[sys.executable, *ENTRIES[entry], *leading, "worker"],
            wait_serving=False,  # it may wait for a server that is not there
        ) as worker:
            await worker.wait_for_log(f"at {display}")
            assert await worker.stop() == 0
    return worker.output


def _nowhere() -> str:
    return f"redis://127.0.0.1:{free_port()}/0"


@pytest.mark.parametrize("entry", list(ENTRIES))
async def test_the_queues_own_url_wins_over_the_default(
    redis_url: str, queue: str, tmp_path: Path, entry: str
) -> None:
    """No --url, no $ECHOMQ_URL: the worker serves at Queue(url=...), not 127.0.0.1:6379."""
    text = await _dialled(
        tmp_path, queue, entry, queue_url=redis_url, env_url=None, flag_url=None, expect=redis_url
    )
    assert f"worker serving {queue!r} at {parse_url(redis_url).display}" in text


async def test_the_queues_own_url_wins_over_echomq_url(
    redis_url: str, queue: str, tmp_path: Path
) -> None:
    """As a producer of that queue does: a URL written in code wins over the environment."""
    text = await _dialled(
        tmp_path, queue, "echomq worker",
        queue_url=redis_url, env_url=_nowhere(), flag_url=None, expect=redis_url,
    )  # fmt: skip
    assert "waiting for redis" not in text


async def test_echomq_url_serves_a_queue_that_names_no_url(
    redis_url: str, queue: str, tmp_path: Path
) -> None:
    text = await _dialled(
        tmp_path, queue, "echomq worker",
        queue_url=None, env_url=redis_url, flag_url=None, expect=redis_url,
    )  # fmt: skip
    assert "waiting for redis" not in text


async def test_the_url_flag_before_the_command_wins_too(
    redis_url: str, queue: str, tmp_path: Path
) -> None:
    """``echomq --url URL worker ...``: the top-level flag is the same explicit argument."""
    text = await _dialled(
        tmp_path, queue, "echomq worker",
        queue_url=_nowhere(), env_url=_nowhere(), flag_url=None, expect=redis_url,
        leading=["--url", redis_url],
    )  # fmt: skip
    assert "waiting for redis" not in text


@pytest.mark.parametrize("entry", list(ENTRIES))
async def test_the_url_flag_wins_over_everything(
    redis_url: str, queue: str, tmp_path: Path, entry: str
) -> None:
    text = await _dialled(
        tmp_path, queue, entry,
        queue_url=_nowhere(), env_url=_nowhere(), flag_url=redis_url, expect=redis_url,
    )  # fmt: skip
    assert "waiting for redis" not in text


async def test_no_url_anywhere_is_the_default(queue: str, tmp_path: Path) -> None:
    """Nothing given: redis://127.0.0.1:6379/0 (served, or waited for)."""
    await _dialled(
        tmp_path, queue, "echomq worker",
        queue_url=None, env_url=None, flag_url=None, expect="redis://127.0.0.1:6379/0",
    )  # fmt: skip
