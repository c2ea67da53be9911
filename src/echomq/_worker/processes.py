"""An opt-in process pool for CPU-bound tasks (``@queue.task(process=True)``).

Rule 1: children are made on demand (at most ``max_workers`` busy at once) and kept idle for
the next call; all of them go when the worker stops. They use the ``spawn`` start method
(a trio process has threads: forking it is unsafe), so a process task must be a plain,
module-level function whose module imports cleanly.
Rule 2: a call is sent as (module, qualified name, args, kwargs) over the child's own pipe
and looked up in the child: the module's attribute is the ``Task`` the decorator made,
which pickle cannot send by reference, so the child calls ``Task.fn`` itself. Arguments,
the result and an exception cross by pickle; one that cannot is replaced by a
``RuntimeError`` that says so. A child runs one call at a time, so the pool knows which
child runs which call.
Rule 3: a call stopped hard (a cancel past its grace, the task's ``timeout``, a lost lease,
a shutdown past grace) kills its child (SIGKILL): the work stops, and the next call gets a
fresh child. No other call is touched.
Rule 4: a soft time limit (``soft_timeout``) travels with the call as the seconds left;
the child arms a timer (``setitimer``, SIGALRM) whose handler raises
:class:`~echomq.errors.SoftTimeLimit` in the call (it interrupts a sleep; the call may
clean up, or return), and disarms it when the call ends.
Rule 5: a child that dies by itself (``os._exit``, a crash) fails its call with
``BrokenProcessPool``; the worker process lives on.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import pickle
import signal
import threading
import traceback
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.connection import Connection
from typing import Any

import trio

from ..errors import SoftTimeLimit

__all__ = ["ProcessPool", "RemoteTraceback", "call_by_name"]

_CONTEXT = multiprocessing.get_context("spawn")
_JOIN_TIMEOUT = 5.0  # seconds an idle child gets to exit when the pool closes


def call_by_name(module: str, qualname: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run in the child: import ``module``, find ``qualname`` and call it (a Task's fn)."""
    target: Any = importlib.import_module(module)
    for part in qualname.split("."):
        target = getattr(target, part)
    fn = getattr(target, "fn", target)  # a Task: its plain function
    return fn(*args, **kwargs)


class RemoteTraceback(Exception):
    """The child's traceback, attached as the ``__cause__`` of an exception it raised."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


_running = False  # (in a child) a call is running: the soft limit's alarm may raise in it


def _soft_limit(signum: int, frame: object) -> None:
    if _running:
        raise SoftTimeLimit()


def _arm(seconds: float | None) -> None:
    if seconds is not None:
        signal.setitimer(signal.ITIMER_REAL, max(seconds, 1e-6))


def _disarm() -> None:
    signal.setitimer(signal.ITIMER_REAL, 0)


def _portable(value: Any) -> Any:
    """``value`` if it survives a pickle round trip, else a RuntimeError saying why."""
    try:
        pickle.loads(pickle.dumps(value))
    except Exception as exc:
        what = "exception" if isinstance(value, BaseException) else "result"
        return RuntimeError(
            f"the {what} {type(value).__name__} could not cross back from the child "
            f"process ({type(exc).__name__}: {exc})"
        )
    return value


def _serve_child(conn: Connection) -> None:
    """The child's loop: one call at a time until the pipe closes (or a None)."""
    global _running
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the worker decides what a Ctrl-C means
    signal.signal(signal.SIGALRM, _soft_limit)
    conn.send("ready")  # the handlers are set
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        module, qualname, args, kwargs, soft = message
        _running = True
        try:
            _arm(soft)
            value = call_by_name(module, qualname, args, kwargs)
            _running = False
            reply: tuple[bool, Any, str | None] = (True, value, None)
        except BaseException as exc:  # the call's, whatever it is (SystemExit included)
            _running = False
            reply = (False, exc, "".join(traceback.format_exception(exc)))
        finally:
            _running = False
            _disarm()
        ok, value, tb = reply
        reply = (ok, _portable(value), tb)
        try:
            conn.send(reply)
        except (EOFError, OSError):
            return


class _Child:
    """One spawned process and the parent's end of its pipe."""

    def __init__(self) -> None:
        self.conn, child_end = _CONTEXT.Pipe()
        self.process = _CONTEXT.Process(target=_serve_child, args=(child_end,), daemon=True)
        self._child_end: Connection | None = child_end

    def start(self) -> None:
        """Start the child and wait until it is ready (its signal handlers are set)."""
        self.process.start()
        if self._child_end is not None:
            self._child_end.close()
            self._child_end = None
        try:
            ready = self.conn.recv()
        except (EOFError, OSError):
            ready = None
        if ready != "ready":
            self.kill()
            raise BrokenProcessPool("a process of the pool did not start")

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def kill(self) -> None:
        """SIGKILL, close our end (a thread blocked reading it wakes up), and reap the
        child in the background (no zombie is left)."""
        try:
            self.process.kill()
        except (OSError, ValueError, AttributeError):
            pass
        self.conn.close()
        if self.process.pid is not None:
            threading.Thread(target=self._reap, name="echomq reap child", daemon=True).start()

    def _reap(self) -> None:
        try:
            self.process.join(_JOIN_TIMEOUT)
        except (OSError, ValueError, AssertionError):
            pass

    def stop(self) -> None:
        """Ask an idle child to exit; kill it if it does not in time."""
        try:
            self.conn.send(None)
        except (OSError, ValueError):
            pass
        self.process.join(_JOIN_TIMEOUT)
        if self.process.is_alive():
            self.kill()
        self.conn.close()


def _receive(conn: Connection) -> tuple[bool, Any, str | None]:
    try:
        reply: tuple[bool, Any, str | None] = conn.recv()
    except (EOFError, OSError):
        raise BrokenProcessPool(
            "a process in the pool terminated abruptly while the call was running"
        ) from None
    return reply


class ProcessPool:
    """Children for ``process=True`` tasks, owned by one worker (see the module rules)."""

    def __init__(self, max_workers: int | None = None) -> None:
        self.max_workers = max_workers or os.cpu_count() or 1
        self._limiter = trio.CapacityLimiter(self.max_workers)
        self._idle: list[_Child] = []
        self._busy: set[_Child] = set()
        self.terminated = 0  # children killed to stop a call (rule 3)

    async def run(
        self,
        module: str,
        qualname: str,
        args: tuple[Any, ...],
        kwargs: Any,
        *,
        soft_deadline: float | None = None,
    ) -> Any:
        """Run the call in a child; a cancellation kills the child (rule 3).

        ``soft_deadline`` (trio time): the call raises SoftTimeLimit then (rule 4).

        Raises:
            BrokenProcessPool: the child died during the call.
            Whatever the call raised (its traceback as ``__cause__``).
        """
        async with self._limiter:
            child = self._idle.pop() if self._idle else None
            if child is None or not child.process.is_alive():
                child = _Child()
                await trio.to_thread.run_sync(child.start)
            self._busy.add(child)
            done = False
            try:
                soft = None if soft_deadline is None else soft_deadline - trio.current_time()
                message = (module, qualname, args, dict(kwargs), soft)
                await trio.to_thread.run_sync(child.conn.send, message, abandon_on_cancel=True)
                ok, value, tb = await trio.to_thread.run_sync(
                    _receive, child.conn, abandon_on_cancel=True
                )
                done = True
            finally:
                self._busy.discard(child)
                if done:
                    self._idle.append(child)
                else:  # cancelled (a hard stop) or broken: the child goes
                    if child.process.is_alive():
                        self.terminated += 1
                    child.kill()
        if ok:
            return value
        if isinstance(value, BaseException) and tb:
            value.__cause__ = RemoteTraceback(tb)
        raise value

    async def aclose(self) -> None:
        """Stop every child (idle ones exit; a busy one, whose call was abandoned, is killed)."""
        idle, self._idle = self._idle, []
        busy, self._busy = list(self._busy), set()
        for child in busy:
            child.kill()
        if idle:
            with trio.CancelScope(shield=True):

                def stop_all() -> None:
                    for child in idle:
                        child.stop()

                await trio.to_thread.run_sync(stop_all)
