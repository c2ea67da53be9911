"""``echomq worker module:queue [module:queue...]``: the one command-line front end of a
worker.

``echomq worker module:attr [--url ...] [--concurrency N] ...`` (also ``python -m echomq
worker``) imports ``attr`` from ``module`` (a :class:`~echomq.Queue`, or a ready
:class:`~echomq.Worker`), runs it under ``trio.run``, and maps signals through
``trio.open_signal_receiver``: the first SIGINT/SIGTERM is a graceful shutdown (stop
claiming, wait ``grace``, hand the rest back to pending); the second cuts the wait short.
Several targets (``echomq worker app:high app:default app:low``, each a Queue) are one
worker serving them all, in strict order or by ``--weights 5,3,1``, with optional
``--caps 10,0,5`` (docs/queues.md).
``--processes N`` (default 1) runs N worker processes under one supervisor instead
(``_worker/fleet.py``: restarts with backoff, signals forwarded, exit 1 on a crash loop,
``/metrics`` of child ``i`` on ``--metrics-port`` + ``i``).
Exit codes: 0 after a clean stop (also while still waiting for Redis), 1 when the worker
failed (a refused password, an ACL refusal or a TLS failure: one line, no traceback), or
stopped serving without a stop asked for (a signal or ``Worker.shutdown``), 2 when the
target cannot be loaded.

The URL: ``--url``, else the queue's own ``Queue(url=...)``, else ``$ECHOMQ_URL``, else
``redis://127.0.0.1:6379/0``: :func:`echomq.config.resolve_url`, the rule every producer
and command follows too (docs/wire.md, "Which URL"). The worker's options: one flag per field of
:class:`~echomq.config.WorkerConfig` (``--concurrency``...), else its ``$ECHOMQ_<FIELD>``
variable, else the field's default; nothing here names an option by hand.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import trio

from .._worker.fleet import SUPERVISED, Fleet
from .._worker.queues import check_turns
from .._worker.worker import Worker
from ..app import Queue
from ..config import WorkerConfig, env_name, per_queue_text, resolve_bind_host
from ..errors import (
    AuthenticationError,
    EchoMQError,
    InvalidArgument,
    PermissionDenied,
    SchemaMismatch,
    TLSError,
)
from .common import USAGE, Commands, say

__all__ = [
    "TargetError",
    "add_config_flags",
    "config_from_flags",
    "load_target",
    "register",
    "run_worker",
]

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
            if os.environ.get(SUPERVISED) == "1":
                nursery.start_soon(_watch_supervisor, worker)
            await worker.serve()
            nursery.cancel_scope.cancel()


async def _watch_supervisor(worker: Worker) -> None:
    """A child of ``--processes``: its standard input is the supervisor's pipe; its end
    (the supervisor is gone, even killed) is a graceful shutdown (``fleet.py`` rule 1)."""
    while await trio.to_thread.run_sync(os.read, 0, 1024, abandon_on_cancel=True):
        pass
    if not worker.stopping:
        log.warning("the supervisor is gone: shutting down (grace %.1f s)", worker.grace)
        worker.shutdown()


def _freeze_renewal(worker: Worker, *, frozen: bool) -> None:
    keeper = worker._keeper
    if keeper is None:
        log.warning("lease renewal hook ignored: not serving yet")
        return
    keeper.frozen = frozen
    log.warning("lease renewal %s (a test hook)", "frozen" if frozen else "thawed")


def run_worker(
    target: str | Sequence[str],
    *,
    url: str | None = None,
    config: WorkerConfig | None = None,
    **options: Any,
) -> int:
    """Load ``target`` (or several, each a Queue: one worker serving them all) and serve
    it until signalled; answer the process exit code.

    ``config`` (or ``options``, fields of :class:`~echomq.config.WorkerConfig`) apply when
    ``target`` names a Queue; when it names a Worker, its own options are used and only
    ``url`` applies: given (``--url``), it replaces the queue's own; None keeps it (the
    queue's ``Queue(url=...)``, else ``$ECHOMQ_URL``, else the default:
    :func:`echomq.config.resolve_url`).
    """
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    try:
        worker = _load_worker(
            [target] if isinstance(target, str) else list(target), config, options
        )
        if url is not None:
            for queue in worker.queues:
                queue.url = url
        if worker.config.metrics_port is not None:  # a name that does not resolve: now
            resolve_bind_host("metrics_host", worker.config.metrics_host)
    except (TargetError, ValueError) as exc:
        log.error("%s", exc)
        return 2
    except InvalidArgument as exc:  # several queues with weights or caps that do not fit
        log.error("%s", exc)
        return USAGE
    try:
        trio.run(serve_until_signalled, worker)
    except Exception as exc:
        leaf = _leaf(exc)
        if isinstance(leaf, AuthenticationError | PermissionDenied | TLSError | SchemaMismatch):
            # not transient: one clear line, not a traceback (docs/wire.md)
            log.error("cannot serve %r: %s", worker.queue.name, leaf)
            return 1
        if isinstance(leaf, OSError) and not isinstance(leaf, EchoMQError):  # a bind
            # that failed (/metrics on a port in use, an address not this machine's)
            log.error("cannot serve %r: %s", worker.queue.name, leaf)
            return 1
        log.exception("worker failed")
        return 1
    if not worker.stopping:  # (serve raises then; this is the last fence before exit 0)
        log.error("the worker stopped serving although no shutdown was asked for")
        return 1
    return 0


def _load_worker(targets: list[str], config: WorkerConfig | None, options: Any) -> Worker:
    """The worker of ``targets``: one Worker, one Queue, or several Queues."""
    found = [load_target(target) for target in targets]
    if len(found) == 1 and isinstance(found[0], Worker):
        return found[0]
    queues: list[Queue] = []
    for target, obj in zip(targets, found, strict=True):
        if not isinstance(obj, Queue):
            raise TargetError(f"{target} is a Worker: name it alone, or name queues")
        queues.append(obj)
    return Worker(queues if len(queues) > 1 else queues[0], config, **options)


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _flag_type(field: attrs.Attribute[Any]) -> Callable[[str], Any]:
    parse = field.metadata["parse"]

    def read(text: str) -> Any:
        try:
            return parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a valid {field.name}: {text!r}") from None

    read.__name__ = field.name  # argparse names the type in its messages
    return read


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per :class:`~echomq.config.WorkerConfig` field: ``--<field-name>``, its
    help, default and environment variable read from the field (default None: not given)."""
    for field in attrs.fields(WorkerConfig):
        parser.add_argument(
            "--" + field.name.replace("_", "-"),
            type=_flag_type(field),
            choices=field.metadata.get("choices"),
            default=None,
            help=f"{field.metadata['help']} (default {field.default}; ${env_name(field.name)})",
        )


def config_from_flags(args: argparse.Namespace) -> WorkerConfig:
    """The flags given, over ``$ECHOMQ_<FIELD>`` variables, over the defaults.

    Raises:
        InvalidArgument: a bad value (from a flag or a variable).
    """
    given = {field.name: getattr(args, field.name) for field in attrs.fields(WorkerConfig)}
    return WorkerConfig.from_env(os.environ, **given)


def _run_command(args: argparse.Namespace) -> int:
    for target in args.target:
        if ":" not in target:
            say(args, f"expected module:queue, not {target!r}")
            return USAGE
    try:
        config = config_from_flags(args)
        if config.metrics_port is not None:  # a name that does not resolve: before anything
            resolve_bind_host("metrics_host", config.metrics_host)
        check_turns(len(args.target), config.weights, config.caps)
    except InvalidArgument as exc:
        say(args, str(exc))
        return USAGE
    url = getattr(args, "url", None) or None
    if args.processes < 1 or args.processes > MAX_PROCESSES:
        say(args, f"--processes must be 1..{MAX_PROCESSES}, not {args.processes}")
        return USAGE
    if args.processes > 1:
        port = config.metrics_port
        if port and port + args.processes - 1 > 65535:
            say(args, f"--metrics-port {port} + {args.processes} processes passes port 65535")
            return USAGE
        return run_fleet(args.target, args.processes, url=url, config=config)
    return run_worker(args.target, url=url, config=config)


MAX_PROCESSES = 1024


def run_fleet(
    target: str | Sequence[str], processes: int, *, url: str | None, config: WorkerConfig
) -> int:
    """``--processes N``: N children ``echomq worker target`` under a :class:`Fleet`, each
    given ``config`` through its ``$ECHOMQ_<FIELD>`` variables; answer the exit code."""
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    env = dict(os.environ)
    for field in attrs.fields(WorkerConfig):
        value = getattr(config, field.name)
        if isinstance(value, tuple):  # weights, caps: as the flag writes them
            env[env_name(field.name)] = per_queue_text(value)
        elif value is not None:
            env[env_name(field.name)] = str(value)
    targets = [target] if isinstance(target, str) else list(target)
    command = [sys.executable, "-m", "echomq", "worker", *targets]
    if url is not None:
        command += ["--url", url]
    fleet = Fleet(command, processes, env, metrics_port=config.metrics_port)
    return trio.run(fleet.run)


def register(commands: Commands) -> None:
    p = commands.add(
        "worker",
        "run a worker: module:queue names a Queue object (several: one worker serving them)",
        entry=_run_command,
    )
    p.add_argument(
        "target",
        nargs="+",
        help="module:attribute of an echomq.Queue (e.g. app.tasks:queue); several are "
        "served by one worker, first first (or by --weights)",
    )
    p.add_argument(
        "--processes",
        type=int,
        default=1,
        help="worker processes under one supervisor (default 1: this process serves; "
        "with N, child i serves /metrics on --metrics-port + i)",
    )
    add_config_flags(p)
