"""The lifeline (echomq._testkit.lifeline): a server ends with the process that started it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import trio

from _waits import until
from echomq._testkit import lifeline

STARTER = textwrap.dedent(
    """
    import sys, time
    from echomq.testing import RedisServer
    server = RedisServer().start()
    print(server.process.pid, server.dir, flush=True)
    if sys.argv[1] == "hang":
        time.sleep(120)
    """
)


def _alive(pid: int) -> bool:
    """The process runs (a zombie whose parent has not reaped it yet counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _start(mode: str) -> tuple[subprocess.Popen[str], int, Path]:
    child = subprocess.Popen(
        [sys.executable, "-c", STARTER, mode], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    pid, directory = child.stdout.readline().split()
    child.stdout.close()
    return child, int(pid), Path(directory)


async def test_a_killed_process_takes_its_redis_server_with_it() -> None:
    """SIGKILL of the process that started a server: the server and its directory go."""
    child, pid, directory = await trio.to_thread.run_sync(_start, "hang")
    try:
        assert _alive(pid) and directory.is_dir()
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        await until(lambda: not _alive(pid) and not directory.exists(), within=10)
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


async def test_a_server_nobody_stopped_ends_at_a_normal_exit() -> None:
    child, pid, directory = await trio.to_thread.run_sync(_start, "exit")
    try:
        assert await trio.to_thread.run_sync(child.wait) == 0
        await until(lambda: not _alive(pid) and not directory.exists(), within=10)
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_pid_that_leads_no_group_is_left_alone(tmp_path: Path) -> None:
    """Rule 2: a watched pid now used by a process in someone else's group is not killed
    (its directory still goes: it was ours)."""
    other = subprocess.Popen(["sleep", "30"])  # in our process group, not its own
    try:
        mine = tmp_path / "dir"
        mine.mkdir()
        lifeline._end(other.pid, str(mine))
        assert other.poll() is None
        assert not mine.exists()
    finally:
        other.kill()
        other.wait()


def test_an_unwatched_group_is_spared_and_a_watched_one_ended() -> None:
    """The lifeline's own protocol: at end-of-file it kills what is still watched, and only
    that (a server stopped on our side was unwatched: it may be a reused pid by then)."""
    spared = subprocess.Popen(["sleep", "30"], start_new_session=True)
    ended = subprocess.Popen(["sleep", "30"], start_new_session=True)
    keeper = subprocess.Popen([sys.executable, "-S", lifeline.__file__], stdin=subprocess.PIPE)
    try:
        assert keeper.stdin is not None
        keeper.stdin.write(f"+{spared.pid} \n+{ended.pid} \n-{spared.pid}\n".encode())
        keeper.stdin.close()
        assert keeper.wait(timeout=10) == 0
        assert ended.wait(timeout=10) == -signal.SIGKILL
        assert spared.poll() is None
    finally:
        for process in (spared, ended, keeper):
            process.kill()
            process.wait()
