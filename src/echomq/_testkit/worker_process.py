"""A worker in a child process, for chaos tests: start it, watch it, stop it, kill it.

Rule 1: the child is the real command line, ``python -m echomq worker module:queue`` with
the options given (``entry`` may name another command line), in a session of its own (so
its process-pool children die with it), with ``ECHOMQ_FAULT_HOOKS=1`` so that
:func:`~echomq.testing.freeze_renewal` can reach its lease keeper (SIGUSR1 / SIGUSR2).
Rule 2: nothing is slept. Readiness is the worker's own start line (``worker serving 'q'
at ...``), read from its output as it comes; a child that exits first raises
:class:`WorkerProcessError` with the tail of its output.
Rule 3: leaving the block stops the worker gracefully (SIGTERM, at most ``stop_timeout``
seconds, then SIGKILL); leaving it with an error or a cancellation kills it at once. The
process group is gone afterwards either way, and the block's own error is raised as
itself (not wrapped in an exception group).
"""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO

import attrs
import trio

from .._scripts import validate as v
from ..errors import EchoMQError, InvalidArgument

__all__ = ["WorkerProcess", "WorkerProcessError", "kill_worker", "open_worker_process"]

FAULT_HOOKS = "ECHOMQ_FAULT_HOOKS"  # read by echomq.cli.worker_cmd (the one hook it has)
SERVING = re.compile(r"worker serving '([^']+)' at ")
_TAIL = 3000  # characters of output quoted in an error
_EOF_WAIT = 5.0  # seconds the output may stay open after the process ended (grandchildren)


class WorkerProcessError(EchoMQError, RuntimeError):
    """A worker process exited (or its output ended) before what was waited for happened."""


@attrs.define(eq=False)
class WorkerProcess:
    """One worker process, made by :func:`open_worker_process`.

    ``pid`` is the worker's (also its process group); ``lines`` is its output so far
    (stdout and stderr, one string per line); ``queue`` is the queue name its start line
    named (None until it serves).
    """

    target: str
    command: list[str]
    process: trio.Process
    log_path: Path | None = None
    lines: list[str] = attrs.field(factory=list)
    queue: str | None = None
    _changed: trio.Event = attrs.field(factory=trio.Event, init=False)
    _eof: trio.Event = attrs.field(factory=trio.Event, init=False)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        """The exit code once the process ended (negative: the signal that ended it)."""
        return self.process.returncode

    @property
    def output(self) -> str:
        """Everything the worker printed so far."""
        return "\n".join(self.lines)

    @property
    def serving(self) -> bool:
        """The start line was seen (the worker claims jobs)."""
        return self.queue is not None

    def tail(self, chars: int = _TAIL) -> str:
        return self.output[-chars:]

    # -- watching --------------------------------------------------------------------------

    async def wait_for_log(self, text: str, *, after: int = 0) -> str:
        """Wait until a line holding ``text`` is printed (among ``lines[after:]``); answer it.

        Raises:
            WorkerProcessError: the output ended (the process exited) first.
        """
        seen = after
        while True:
            for line in self.lines[seen:]:
                if text in line:
                    return line
            seen = max(seen, len(self.lines))
            if self._eof.is_set():
                raise WorkerProcessError(
                    f"worker {self.target} (pid {self.pid}, exit {self.returncode}) never "
                    f"printed {text!r}; its output ends:\n{self.tail()}"
                )
            await self._changed.wait()

    async def wait_serving(self) -> str:
        """Wait for the start line (``worker serving 'q' at ...``); answer the queue name."""
        line = await self.wait_for_log("worker serving ")
        found = SERVING.search(line)
        self.queue = found.group(1) if found else ""
        return self.queue

    async def wait(self) -> int:
        """Wait until the process exits (and its output is read); answer its exit code."""
        code = await self.process.wait()
        with trio.move_on_after(_EOF_WAIT):
            await self._eof.wait()
        return code

    # -- ending ----------------------------------------------------------------------------

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` to the worker process (not its group); a no-op once it exited."""
        if self.process.returncode is None:
            self.process.send_signal(sig)

    async def kill(self) -> int:
        """SIGKILL the worker and its process group (a crash, mid-job or not); answer the
        exit code (``-9``) once it is gone."""
        if self.process.returncode is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:  # pragma: no cover - it ended meanwhile
                pass
        code = await self.process.wait()
        self._kill_group()  # pool children still around after an exit of its own
        with trio.move_on_after(_EOF_WAIT):
            await self._eof.wait()
        return code

    async def stop(self, *, kill_after: float = 15.0) -> int:
        """SIGTERM (the graceful stop: grace, then hand back) and wait at most
        ``kill_after`` seconds; then SIGKILL. Answer the exit code (0 after a clean stop)."""
        self.send_signal(signal.SIGTERM)
        try:
            with trio.move_on_after(kill_after):
                return await self.wait()
            return await self.kill()
        except BaseException:
            with trio.CancelScope(shield=True):
                await self.kill()
            raise

    def _kill_group(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    async def _read_output(self, log: IO[bytes] | None) -> None:
        stream = self.process.stdout
        assert stream is not None
        partial = b""
        try:
            while True:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    break
                if log is not None:
                    log.write(chunk)
                    log.flush()
                partial += chunk
                *complete, partial = partial.split(b"\n")
                if complete:
                    self.lines.extend(c.decode(errors="replace").rstrip("\r") for c in complete)
                    self._notify()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            if partial:
                self.lines.append(partial.decode(errors="replace"))
            self._eof.set()
            self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()


async def kill_worker(worker: WorkerProcess) -> int:
    """SIGKILL a worker process mid-job (its group with it); answer its exit code (-9).

    Its held jobs stay active until their leases lapse; then recovery (another worker's,
    or the next one started) brings them back, counted as a stall.
    """
    return await worker.kill()


def _command(
    target: str,
    entry: Sequence[str] | None,
    url: str | None,
    options: Mapping[str, object],
    args: Sequence[str],
) -> list[str]:
    command = [*(entry or (sys.executable, "-m", "echomq", "worker")), target]
    if url is not None:
        command += ["--url", url]
    for flag, value in options.items():
        if value is not None:
            command += [f"--{flag}", str(value)]
    return [*command, *args]


def _check(
    target: object,
    concurrency: int | None,
    recovery: str | None,
    recovery_interval: float | None,
    max_stalled: int | None,
    grace: float | None,
    timeouts: Mapping[str, float],
) -> None:
    """Bad options raise InvalidArgument before anything is started."""
    if not isinstance(target, str) or target.count(":") != 1 or target.startswith(":"):
        raise InvalidArgument(f"target must be 'module:attribute', not {target!r}")
    if concurrency is not None:
        v.int_in("concurrency", concurrency, 1, 100_000)
    if max_stalled is not None:
        v.positive_int("max_stalled", max_stalled)
    if recovery not in (None, "reap", "stalled"):
        raise InvalidArgument(f"recovery must be 'reap' or 'stalled', not {recovery!r}")
    seconds = {"recovery_interval": recovery_interval, **timeouts}
    for name, value in seconds.items():
        if value is not None and not _is_number(value, positive=True):
            raise InvalidArgument(f"{name} must be a positive number of seconds, not {value!r}")
    if grace is not None and not _is_number(grace, positive=False):
        raise InvalidArgument(f"grace must be >= 0 seconds, not {grace!r}")


def _is_number(value: object, *, positive: bool) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return False
    return value > 0 if positive else value >= 0


@asynccontextmanager
async def open_worker_process(
    target: str,
    *,
    url: str | None = None,
    concurrency: int | None = None,
    recovery: str | None = None,
    recovery_interval: float | None = None,
    max_stalled: int | None = None,
    grace: float | None = None,
    args: Sequence[str] = (),
    env: Mapping[str, str | None] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    log_path: str | os.PathLike[str] | None = None,
    entry: Sequence[str] | None = None,
    wait_serving: bool = True,
    startup_timeout: float = 30.0,
    stop_timeout: float = 15.0,
) -> AsyncIterator[WorkerProcess]:
    """Run ``echomq worker target`` in a child process for the block.

    Args:
        target: ``module:attribute`` naming an ``echomq.Queue`` (or a ``Worker``); the
            module is imported in the child (``cwd`` is importable, as for ``python -m``).
        url: ``--url``; None leaves it to the queue's own URL, else ``$ECHOMQ_URL``.
        concurrency: the worker's ``--concurrency`` (None: the worker's default; the
            same for the next four).
        recovery: ``--recovery``.
        recovery_interval: ``--recovery-interval``.
        max_stalled: ``--max-stalled``.
        grace: ``--grace``.
        args: more command-line arguments, after the options.
        env: environment changes for the child (a None value removes that variable;
            ``ECHOMQ_FAULT_HOOKS`` is set to ``1`` unless removed so).
        log_path: also write the worker's output to this file.
        entry: the command line before ``target`` (default ``python -m echomq worker``).
        wait_serving: return once the worker serves (its start line); False returns at
            once (a worker that waits for Redis, or is meant to fail).
        startup_timeout: seconds to wait for the start line.
        stop_timeout: seconds the graceful stop at the end of the block may take.

    Raises:
        InvalidArgument: a bad option (nothing is started).
        WorkerProcessError: the worker exited, or did not serve within ``startup_timeout``.
    """
    _check(
        target,
        concurrency,
        recovery,
        recovery_interval,
        max_stalled,
        grace,
        {"startup_timeout": startup_timeout, "stop_timeout": stop_timeout},
    )
    options = {
        "concurrency": concurrency,
        "recovery": recovery,
        "recovery-interval": recovery_interval,
        "max-stalled": max_stalled,
        "grace": grace,
    }
    command = _command(target, entry, url, options, args)
    child_env = {**os.environ, FAULT_HOOKS: "1", "PYTHONUNBUFFERED": "1"}
    for name, value in (env or {}).items():  # {FAULT_HOOKS: None}: a worker without the hook
        if value is None:
            child_env.pop(name, None)
        else:
            child_env[name] = value
    log = open(log_path, "wb") if log_path is not None else None  # noqa: ASYNC230 - a local file, closed below
    failure: BaseException | None = None
    try:
        process = await trio.lowlevel.open_process(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=child_env,
            cwd=cwd,
            start_new_session=True,  # its own group: killed with its pool children
        )
        async with trio.open_nursery() as nursery:
            worker = WorkerProcess(
                target=target,
                command=command,
                process=process,
                log_path=Path(log_path) if log_path is not None else None,
            )
            nursery.start_soon(worker._read_output, log)
            try:
                if wait_serving:
                    with trio.move_on_after(startup_timeout) as waiting:
                        await worker.wait_serving()
                    if waiting.cancelled_caught:
                        raise WorkerProcessError(
                            f"worker {target} did not serve within {startup_timeout:g} s; "
                            f"its output ends:\n{worker.tail()}"
                        )
                yield worker
            except BaseException as exc:  # re-raised below, as itself
                failure = exc
                with trio.CancelScope(shield=True):
                    await worker.kill()
            else:
                await worker.stop(kill_after=stop_timeout)
            nursery.cancel_scope.cancel()  # the output reader, if a grandchild holds the pipe
    finally:
        if log is not None:
            log.close()
    if failure is not None:
        try:
            raise failure
        finally:
            failure = None
