"""The lifeline: a server this process started ends when this process ends, however it ends.

A redis-server or postgres started by ``echomq.testing`` (or the demo's embedded server)
runs in a session of its own, so a Ctrl-C in a terminal reaches us, not it. When we stop
normally, ``stop()`` ends it. When we are killed (SIGKILL, a CI time-out, the OOM killer),
nothing of ours runs any more; without a lifeline the server would live on, orphaned.

Rule 1: the first server a process starts starts its lifeline: a small Python process (this
file, run by path: it imports only the standard library) whose standard input is a pipe
whose only writer is us. ``watch(pid, directory)`` tells it about a server (its process
group: the server runs in a session of its own, so pid == pgid), ``unwatch(pid)`` that it
ended. When the pipe reaches end-of-file (we ended, whatever the way) the lifeline kills
every group still watched (SIGKILL, like a crash) and removes the directories it was told
about, then exits.
Rule 2: before it kills, the lifeline checks the group still has that leader (the pid is
alive and leads its group), so a pid reused by an unrelated process is left alone.
Rule 3: best effort and never in the way: when the lifeline cannot be started or has died,
servers start as before (without one); a forked child starts a lifeline of its own (the
parent's pipe is the parent's).
Rule 4: at a normal exit we close the pipe ourselves and wait for the lifeline (bounded), so
a server nobody stopped ends with us too, and no lifeline outlives an orderly exit.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

__all__ = ["unwatch", "watch"]

_lock = threading.Lock()  # servers are started from trio's worker threads too
_process: subprocess.Popen[bytes] | None = None
_owner = 0  # the pid that started _process (a forked child starts its own)


def watch(pid: int, directory: str | os.PathLike[str] | None = None) -> None:
    """Kill the process group ``pid`` (and remove ``directory``) when this process ends."""
    with _lock:
        _send(f"+{pid} {os.fspath(directory) if directory else ''}\n", start=True)


def unwatch(pid: int) -> None:
    """The group ``pid`` ended (or was stopped) on our side: forget it."""
    with _lock:
        _send(f"-{pid}\n", start=False)


def _send(line: str, *, start: bool) -> None:
    global _process, _owner
    alive = _process is not None and _owner == os.getpid() and _process.poll() is None
    if not alive:
        if not start:
            return
        try:
            _process = subprocess.Popen(
                [sys.executable, "-S", os.path.abspath(__file__)],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C to our terminal does not end it first
            )
        except OSError:
            _process = None  # rule 3
            return
        _owner = os.getpid()
        atexit.register(_close, _process)
    assert _process is not None and _process.stdin is not None
    try:
        _process.stdin.write(line.encode())
        _process.stdin.flush()
    except (BrokenPipeError, ValueError):  # it died: rule 3
        _process = None


def _close(process: subprocess.Popen[bytes]) -> None:
    """Rule 4 (atexit): end-of-file now; the lifeline ends what is still watched."""
    if _owner != os.getpid() or process.stdin is None:
        return
    try:
        process.stdin.close()
        process.wait(timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        pass


def _leads_its_group(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False


def _end(pid: int, directory: str) -> None:
    if _leads_its_group(pid):  # rule 2
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + 5.0
        while _leads_its_group(pid) and time.monotonic() < deadline:
            time.sleep(0.01)  # not our child: its parent (init, once we are gone) reaps it
    if directory:
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    """Read watch / unwatch lines until end-of-file, then end what is still watched."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    watched: dict[int, str] = {}
    for raw in sys.stdin.buffer:
        line = raw.decode(errors="replace").rstrip("\n")
        if line.startswith("+"):
            pid, _, directory = line[1:].partition(" ")
            watched[int(pid)] = directory
        elif line.startswith("-"):
            watched.pop(int(line[1:]), None)
    for pid, directory in watched.items():
        _end(pid, directory)


if __name__ == "__main__":
    main()
