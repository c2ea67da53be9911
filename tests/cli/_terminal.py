"""Run ``python -m echomq`` in a pseudo-terminal of a given size, as a person's shell would.

stdout is the terminal (a pty whose window size is set with ``TIOCSWINSZ``, and
``COLUMNS``/``LINES`` agree), so rich draws for that width with colours and live
progress; stderr is a pipe, read apart (or the terminal too, when asked). The output
comes back with the terminal's escape sequences removed and ``\\r\\n`` as ``\\n``.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import struct
import subprocess
import sys
import termios

import attrs
import trio

__all__ = ["Terminal", "in_terminal", "visible"]

_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[()][A-Z0-9]")


def visible(raw: str) -> str:
    """What a person sees of ``raw``: escape sequences dropped, line ends plain, and of a
    line redrawn in place (a carriage return, as a live progress bar does) its last draw."""
    lines = _ESCAPES.sub("", raw.replace("\r\n", "\n")).split("\n")
    return "\n".join(line.rsplit("\r", 1)[-1] for line in lines)


@attrs.frozen
class Terminal:
    """One command's run: its exit code, what the terminal showed, and its stderr."""

    code: int
    screen: str
    stderr: str

    @property
    def lines(self) -> list[str]:
        return self.screen.splitlines()


def _run(
    argv: list[str], env: dict[str, str], columns: int, rows: int, stderr_tty: bool
) -> Terminal:
    master, slave = os.openpty()
    try:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        proc = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave if stderr_tty else subprocess.PIPE,
            env=env, start_new_session=True,
        )  # fmt: skip
    finally:
        os.close(slave)
    chunks: list[bytes] = []
    try:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError as exc:  # EIO: the child closed its end of the terminal
                if exc.errno != errno.EIO:
                    raise
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(master)
    stderr = ""
    if proc.stderr is not None:
        with proc.stderr:  # a line or two: read once stdout is done
            stderr = proc.stderr.read().decode()
    code = proc.wait(timeout=30)
    return Terminal(code, visible(b"".join(chunks).decode()), stderr)


async def in_terminal(
    url: str, *args: str, columns: int = 80, rows: int = 50, stderr_tty: bool = False
) -> Terminal:
    """``python -m echomq ARGS`` (ECHOMQ_URL=url) on a terminal ``columns`` wide (with
    ``stderr_tty`` stderr goes to the terminal too, and ``stderr`` is empty)."""
    env = {**os.environ, "ECHOMQ_URL": url, "COLUMNS": str(columns), "LINES": str(rows)}
    env.setdefault("TERM", "xterm-256color")
    env.pop("NO_COLOR", None)
    argv = [sys.executable, "-m", "echomq", *args]
    with trio.fail_after(60):
        return await trio.to_thread.run_sync(
            _run, argv, env, columns, rows, stderr_tty, abandon_on_cancel=True
        )
