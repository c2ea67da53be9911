"""``echomq worker module:queue``: the one command-line front end of a worker.

``echomq worker module:attr [--url ...] [--concurrency N] ...`` (also ``python -m echomq
worker``) imports ``attr`` from ``module`` (a :class:`~echomq.Queue`, or a ready
:class:`~echomq.Worker`), runs it under ``trio.run``, and maps signals through
``trio.open_signal_receiver``: the first SIGINT/SIGTERM is a graceful shutdown (stop
claiming, wait ``grace``, hand the rest back to pending); the second cuts the wait short.
Exit codes: 0 after a clean stop (also while still waiting for Redis), 1 when the worker
failed (a refused password, an ACL refusal or a TLS failure: one line, no traceback), 2
when the target cannot be loaded.

The URL: ``--url``, else ``$ECHOMQ_URL``, else the queue's own ``Queue(url=...)``, else
``redis://127.0.0.1:6379/0``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys

import trio

from .._worker.sweeper import Recovery
from .._worker.worker import Worker
from ..app import Queue
from ..errors import AuthenticationError, EchoMQError, PermissionDenied, TLSError
from .common import USAGE, Commands, positive_int, say

__all__ = ["TargetError", "load_target", "register", "resolve_url", "run_worker"]

log = logging.getLogger("echomq.worker")


class TargetError(EchoMQError):
    """``module:attr`` does not name a Queue or a Worker."""


def load_target(target: str) -> Queue | Worker:
    """Import ``module:attr`` (the current directory is importable, as for ``python -m``)."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise TargetError(f"expected module:attribute, not {target!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise TargetError(f"cannot import {module_name!r}: {exc}") from exc
    obj: object = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise TargetError(f"{module_name!r} has no attribute {attr!r}") from None
    if isinstance(obj, Queue | Worker):
        return obj
    raise TargetError(f"{target} is a {type(obj).__name__}, not an echomq Queue or Worker")


FAULT_HOOKS = "ECHOMQ_FAULT_HOOKS"  # "1": SIGUSR1/SIGUSR2 freeze/thaw renewal (a test hook)


async def serve_until_signalled(worker: Worker) -> None:
    """Serve; the first SIGINT/SIGTERM stops gracefully, the second without grace.

    With ``ECHOMQ_FAULT_HOOKS=1`` (``echomq.testing`` sets it), SIGUSR1 freezes the lease
    keeper and SIGUSR2 thaws it (docs/testing.md); otherwise both keep their default.
    """
    hooks = (signal.SIGUSR1, signal.SIGUSR2) if os.environ.get(FAULT_HOOKS) == "1" else ()
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, *hooks) as signals:
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                count = 0
                async for signum in signals:
                    if signum in hooks:
                        _freeze_renewal(worker, frozen=signum == signal.SIGUSR1)
                        continue
                    count += 1
                    name = signal.Signals(signum).name
                    if count == 1:
                        log.info("%s: shutting down (grace %.1f s)", name, worker.grace)
                        worker.shutdown()
                    else:
                        log.warning("%s again: stopping without grace", name)
                        worker.shutdown(grace=0)

            nursery.start_soon(watch)
            await worker.serve()
            nursery.cancel_scope.cancel()


def _freeze_renewal(worker: Worker, *, frozen: bool) -> None:
    keeper = worker._keeper
    if keeper is None:
        log.warning("lease renewal hook ignored: not serving yet")
        return
    keeper.frozen = frozen
    log.warning("lease renewal %s (a test hook)", "frozen" if frozen else "thawed")


def run_worker(
    target: str,
    *,
    url: str | None = None,
    concurrency: int = 64,
    recovery: str = "reap",
    recovery_interval: float = 5.0,
    max_stalled: int = 1,
    grace: float = 10.0,
) -> int:
    """Load ``target`` and serve it until signalled; answer the process exit code.

    When ``target`` names a Worker, its own options are used and only ``url`` applies.
    ``url`` None keeps the queue's own (``Queue(url=...)``); see :func:`resolve_url`.
    """
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    try:
        obj = load_target(target)
        if isinstance(obj, Worker):
            worker = obj
        else:
            if recovery not in ("reap", "stalled"):
                raise TargetError(f"recovery must be 'reap' or 'stalled', not {recovery!r}")
            mode: Recovery = "stalled" if recovery == "stalled" else "reap"
            worker = Worker(
                obj,
                concurrency=concurrency,
                recovery=mode,
                recovery_interval=recovery_interval,
                max_stalled=max_stalled,
                grace=grace,
            )
        if url is not None:
            worker.queue.url = url
    except (TargetError, ValueError) as exc:
        log.error("%s", exc)
        return 2
    try:
        trio.run(serve_until_signalled, worker)
    except Exception as exc:
        leaf = _leaf(exc)
        if isinstance(leaf, AuthenticationError | PermissionDenied | TLSError):
            # not transient: one clear line, not a traceback (docs/wire.md)
            log.error("cannot serve %r: %s", worker.queue.name, leaf)
            return 1
        log.exception("worker failed")
        return 1
    return 0


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def resolve_url(flag: str | None) -> str | None:
    """The URL a worker uses: ``--url``, else ``$ECHOMQ_URL``, else None (the queue's own
    ``Queue(url=...)``, whose default is ``redis://127.0.0.1:6379/0``)."""
    return flag or os.environ.get("ECHOMQ_URL") or None


def _run_command(args: argparse.Namespace) -> int:
    if ":" not in args.target:
        say(args, f"expected module:queue, not {args.target!r}")
        return USAGE
    options = {
        name: getattr(args, name)
        for name in ("concurrency", "recovery", "recovery_interval", "max_stalled", "grace")
        if getattr(args, name) is not None
    }
    return run_worker(args.target, url=resolve_url(getattr(args, "url", None)), **options)


def register(commands: Commands) -> None:
    p = commands.add(
        "worker", "run a worker: module:queue names a Queue object", entry=_run_command
    )
    p.add_argument("target", help="module:attribute of an echomq.Queue (e.g. app.tasks:queue)")
    p.add_argument("--concurrency", type=positive_int, help="jobs at once (default 64)")
    p.add_argument("--recovery", choices=("reap", "stalled"), help="(default reap)")
    p.add_argument("--recovery-interval", type=float, help="seconds (default 5)")
    p.add_argument(
        "--max-stalled",
        type=positive_int,
        help="recovery bound (default 1): stalled = dead at N stalls; reap = recovered N times",
    )
    p.add_argument("--grace", type=float, help="seconds for in-flight jobs (default 10)")
