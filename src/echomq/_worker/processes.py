"""An opt-in process pool for CPU-bound tasks (``@queue.task(process=True)``).

Rule 1: the pool is made on the first such job and shut down with the worker; it uses the
``spawn`` start method (a trio process has threads: forking it is unsafe), so a process
task must be a plain, module-level function whose module imports cleanly.
Rule 2: a call is sent as (module, qualified name, args, kwargs) and looked up in the
child: the module's attribute is the ``Task`` the decorator made, which pickle cannot
send by reference, so the child calls ``Task.fn`` itself. Arguments and the result cross
the process boundary by pickle (they are already JSON values, decoded by the worker).
Rule 3: a running call cannot be interrupted: like a thread, a cancel request waits for
it; a lost lease, a shutdown past grace or a timeout abandon it (its result is dropped).
Rule 4: a child that dies (``os._exit``, a crash) breaks the pool: the calls it was running
fail with ``BrokenProcessPool`` (their jobs' failure), and the pool is dropped so that the
next call starts a fresh one. The worker process itself lives on.
"""

from __future__ import annotations

import concurrent.futures
import importlib
import multiprocessing
import os
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import trio

__all__ = ["ProcessPool", "call_by_name"]


def call_by_name(module: str, qualname: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run in the child: import ``module``, find ``qualname`` and call it (a Task's fn)."""
    target: Any = importlib.import_module(module)
    for part in qualname.split("."):
        target = getattr(target, part)
    fn = getattr(target, "fn", target)  # a Task: its plain function
    return fn(*args, **kwargs)


class ProcessPool:
    """A lazily made ``ProcessPoolExecutor`` owned by one worker."""

    def __init__(self, max_workers: int | None = None) -> None:
        self.max_workers = max_workers or os.cpu_count() or 1
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None

    def _get(self) -> concurrent.futures.ProcessPoolExecutor:
        if self._pool is None:
            self._pool = concurrent.futures.ProcessPoolExecutor(
                self.max_workers, mp_context=multiprocessing.get_context("spawn")
            )
        return self._pool

    async def run(self, module: str, qualname: str, args: tuple[Any, ...], kwargs: Any) -> Any:
        """Run the call in a child process; abandoned (not interrupted) when cancelled."""
        pool = self._get()
        try:
            future = pool.submit(call_by_name, module, qualname, args, dict(kwargs))
        except BrokenProcessPool:
            self._drop(pool)
            future = self._get().submit(call_by_name, module, qualname, args, dict(kwargs))
        try:
            return await trio.to_thread.run_sync(future.result, abandon_on_cancel=True)
        except BrokenProcessPool:
            self._drop(pool)
            raise
        finally:
            future.cancel()  # not started yet: never runs; running: its result is dropped

    def _drop(self, pool: concurrent.futures.ProcessPoolExecutor) -> None:
        """Forget a broken pool (its children are gone or going); the next call makes one."""
        if self._pool is pool:
            self._pool = None
            pool.shutdown(wait=False, cancel_futures=True)

    async def aclose(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(lambda: pool.shutdown(wait=True, cancel_futures=True))
