"""What every ``echomq`` command shares: exit codes, the registry of commands, the way a
command gets its connection, and how a refusal reads.

Rule 1: every command is a thin shell over a verb (``echomq.admin``, ``echomq.jobs``,
``echomq.cancel``); no command writes Redis by itself, and none builds a key.
Rule 2: exit codes: 0 done, 1 refused (a typed refusal or an unreachable server; the reason
in plain words on stderr, never a traceback), 2 usage (bad flags, names or JSON).
Rule 3: no command creates a queue by naming it. A command that names its queue (``queue=``
in :meth:`Commands.add`, or a ``run`` wrapped in :func:`checked` for one that names it its
own way) first asks ``admin.queue_exists``: an unknown queue is exit 1 with one line on
stderr (a typo never makes a ghost queue). ``enqueue`` and ``repeat add`` create one with
``--create``.
Bad input still wins (exit 2 whatever the server holds): on an unknown queue the command
is rehearsed against a :class:`Rehearsal`, which answers no command, so input that its
gates refuse before their first I/O says so instead.
Rule 4: a command is declared once, with :meth:`Commands.add`: either ``run`` (an async
function handed an open connection, a stdout console and the parsed arguments) or
``entry`` (a blocking function that runs its own loop and answers an exit code: the
worker, the dashboard, the demo). ``rich`` is imported only by commands that print with
it, so ``echomq worker`` starts without it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal, NoReturn, cast

import trio

from .. import admin
from .._model.codec import check_json_depth
from .._model.text import show_bytes
from .._wire.connection import Connection
from .._wire.dial import connect
from ..config import parse_url, resolve_url
from ..errors import (
    ActiveJobs,
    ConnectionLost,
    DuplicateJob,
    EchoMQError,
    InvalidArgument,
    InvalidKey,
    JobGone,
    JobLocked,
    NotCancellable,
    NotDead,
    NotPaused,
    QueueNotFound,
    SerializationError,
    ServerError,
)

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "DEFAULT_QUEUE",
    "DONE",
    "REFUSED",
    "USAGE",
    "Command",
    "Commands",
    "Entry",
    "UsageError",
    "call_args",
    "checked",
    "lazy",
    "positive_int",
    "port",
    "refusal",
    "require_queue",
    "show",
    "url_of",
    "utc",
]

DONE, REFUSED, USAGE = 0, 1, 2
DEFAULT_QUEUE = "default"
SHOW_LIMIT = 64 * 1024  # bytes of a payload or result `job` prints

#: ``run``: an async command handed an open connection, the arguments and stdout
Command = Callable[[Connection, argparse.Namespace, "Console"], Awaitable[int]]
#: ``entry``: a blocking command that runs its own loop; answers the exit code
Entry = Callable[[argparse.Namespace], int]


class UsageError(Exception):
    """Bad input found after argparse: exit 2 with the message."""


def consoles() -> tuple[Console, Console]:
    """stdout and stderr consoles; off a terminal (a pipe, a file, a test) tables get room."""
    from rich.console import Console

    width = None if sys.stdout.isatty() else 200
    out = Console(highlight=False, width=width)
    return out, Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 200)


def url_of(args: argparse.Namespace) -> str:
    """``--url``, else ``$ECHOMQ_URL``, else the default local Redis
    (:func:`~echomq.config.resolve_url`: a command names no queue object)."""
    return resolve_url(getattr(args, "url", None))


def refusal(exc: EchoMQError, args: argparse.Namespace) -> str:
    """The reason for a refusal, in plain words."""
    queue = getattr(args, "queue", None)
    job = getattr(args, "id", None)
    if isinstance(exc, QueueNotFound):
        where = parse_url(url_of(args)).display
        create = "; pass --create to make it" if hasattr(args, "create") else ""
        return (
            f"no queue {exc.queue!r} at {where} (a queue exists once a worker or a producer "
            f"has used it; `echomq status` lists them){create}"
        )
    if isinstance(exc, JobGone):
        return f"no job {job!r} in queue {queue!r}"
    if isinstance(exc, JobLocked):
        return f"job {job!r} is under an operator lock (its :lock key or lock field); not removed"
    if isinstance(exc, NotDead):
        return f"job {job!r} is not dead: only dead jobs can be reprocessed"
    if isinstance(exc, NotPaused):
        return f"queue {queue!r} is not paused: run `echomq pause {queue}` first"
    if isinstance(exc, ActiveJobs):
        return f"queue {queue!r} has jobs in flight: wait for them, or pass --force"
    if isinstance(exc, NotCancellable):
        return f"job {job!r} is already completed or dead: there is nothing to cancel"
    if isinstance(exc, DuplicateJob):
        return f"a job with id {getattr(args, 'job_id', None)!r} already exists in queue {queue!r}"
    if isinstance(exc, ConnectionLost):
        return f"cannot reach Redis at {parse_url(url_of(args)).display}: {exc}"
    if isinstance(exc, ServerError):
        return f"Redis refused: {exc}"
    return str(exc) or type(exc).__name__


def leaf(exc: BaseException) -> BaseException:
    """The one error inside (nested) single-error groups."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def run_with_connection(command: Command, args: argparse.Namespace) -> int:
    """Open a connection, run ``command``, map errors to exit codes."""
    from rich.markup import escape

    out, err = consoles()

    async def body() -> int:
        async with connect(url_of(args)) as conn:
            return await command(conn, args, out)

    try:
        return trio.run(body)
    except KeyboardInterrupt:
        return DONE
    except Exception as group:  # unwrap nursery groups; re-raise what is not ours
        exc = leaf(group)
        if isinstance(exc, UsageError | InvalidKey | InvalidArgument | SerializationError):
            err.print(f"echomq {args.command}: {escape(str(exc))}", soft_wrap=True)
            return USAGE
        if isinstance(exc, EchoMQError):
            err.print(f"echomq {args.command}: {escape(refusal(exc, args))}", soft_wrap=True)
            return REFUSED
        if isinstance(exc, OSError):
            err.print(f"echomq {args.command}: {escape(str(exc))}", soft_wrap=True)
            return REFUSED
        raise


async def require_queue(conn: Connection, args: argparse.Namespace, queue: str) -> None:
    """Refuse (``QueueNotFound``, exit 1) a queue that does not exist, unless the command
    was given ``--create``."""
    if not getattr(args, "create", False):
        await admin.require_queue(conn, queue)


class _Reached(Exception):
    """A rehearsed command got as far as its first command to Redis."""


class Rehearsal:
    """A connection that answers no command (each raises :class:`_Reached`): a command run
    against it stops at its first I/O, having run every gate of its input on the way.
    Only :func:`checked` makes one, for a queue that does not exist."""

    def __init__(self, conn: Connection) -> None:
        self.config = conn.config
        self.sharded_pubsub = conn.sharded_pubsub

    async def execute(self, *args: object) -> Any:
        raise _Reached

    async def execute_pipeline(self, commands: object) -> list[Any]:
        raise _Reached

    async def execute_packed(self, packed: bytes) -> Any:
        raise _Reached

    async def every_master(self) -> list[Any]:
        raise _Reached

    def drop(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


def checked(run: Command) -> Command:
    """``run`` if ``args.queue`` exists (or ``--create`` was given, or it names none);
    else the refusal ``QueueNotFound``, after a rehearsal that lets bad input say so
    first (Rule 3)."""

    async def command(conn: Connection, args: argparse.Namespace, out: Console) -> int:
        queue = getattr(args, "queue", None)
        if queue is None:
            return await run(conn, args, out)
        try:
            await require_queue(conn, args, queue)
        except QueueNotFound:
            try:  # the handlers take a Connection; a rehearsal answers what they call of one
                await run(cast(Connection, Rehearsal(conn)), args, out)
            except Exception as exc:  # (inside a nursery it comes in a group)
                if not isinstance(leaf(exc), _Reached):
                    raise
            raise
        return await run(conn, args, out)

    return command


def say(args: argparse.Namespace, message: str) -> None:
    """One line on stderr, for entry commands (no rich)."""
    print(f"echomq {args.command}: {message}", file=sys.stderr)


def lazy(module: str, name: str, feature: str) -> Any:
    """``module.name``, or a refusal saying that this install lacks ``feature``."""
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise EchoMQError(
            f"{feature} is not available in this install ({module}.{name}: {exc})"
        ) from None


def utc(ms: int | None) -> str:
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S") + "Z"


def show(data: bytes | None) -> str:
    """A payload or result as stored, never parsed: text, or raw bytes marked as such."""
    if data is None:
        return "-"
    return show_bytes(data, SHOW_LIMIT)


# -- argument types ------------------------------------------------------------------------


#: arrays and objects ``enqueue``'s JSON arguments may nest, at most (refused before parsing)
MAX_ARGS_DEPTH = 100


def call_args(raw: str | None) -> tuple[list[Any], dict[str, Any]]:
    """``[json args]``: a JSON array is the args, an object the kwargs, anything else one arg.

    Raises:
        UsageError: not JSON.
        SerializationError: nested deeper than :data:`MAX_ARGS_DEPTH` (before parsing).
    """
    if raw is None:
        return [], {}
    check_json_depth(raw, "the arguments", MAX_ARGS_DEPTH)
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise UsageError(f"arguments are not JSON: {exc}") from None
    if isinstance(value, list):
        return value, {}
    if isinstance(value, dict):
        return [], value
    return [value], {}


class Parser(argparse.ArgumentParser):
    """Usage errors exit 2 (argparse's own code), with the usage line."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(USAGE, f"{self.prog}: {message}\n")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
    return value


def port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0..65535 (0: any free port), not {value}")
    return value


# -- the registry ----------------------------------------------------------------------------


class Commands:
    """The registry of ``echomq`` subcommands: each command module's ``register`` calls
    :meth:`add` once per command (``cli/__init__.py`` lists the modules)."""

    def __init__(self, sub: argparse._SubParsersAction[Parser]) -> None:
        self._sub = sub
        self.default_queue = os.environ.get("ECHOMQ_QUEUE") or DEFAULT_QUEUE

    def add(
        self,
        name: str,
        help: str,
        *,
        queue: Literal["positional", "option"] | None = None,
        run: Command | None = None,
        entry: Entry | None = None,
    ) -> argparse.ArgumentParser:
        """Declare ``echomq <name>``; answer its parser, for the command's own flags.

        Args:
            queue: how the command names its queue: ``"positional"`` (``echomq pause q``),
                ``"option"`` (``-q/--queue``, default ``$ECHOMQ_QUEUE`` or ``default``),
                or None (it names none, or does it its own way: its ``run`` is
                wrapped in :func:`checked`, which reads ``args.queue``).
            run: an async ``(conn, args, out) -> exit code``, handed an open connection
                to ``--url``; typed refusals become exit code 1, bad input 2. With a
                ``queue``, it runs only if the queue exists (Rule 3).
            entry: a blocking ``(args) -> exit code`` that runs its own loop instead.
        """
        if (run is None) == (entry is None):
            raise ValueError(f"command {name!r}: give exactly one of run= and entry=")
        p = self._sub.add_parser(name, help=help, description=help)
        p.add_argument("--url", default=argparse.SUPPRESS, help="Redis URL")
        if queue == "positional":
            p.add_argument("queue", help="the queue's name")
        elif queue == "option":
            p.add_argument(
                "-q", "--queue", default=self.default_queue,
                help=f"the queue (default: $ECHOMQ_QUEUE or {DEFAULT_QUEUE!r})",
            )  # fmt: skip
        if run is not None:
            command = checked(run) if queue is not None else run
            p.set_defaults(handler=lambda args: run_with_connection(command, args))
        else:
            p.set_defaults(handler=entry)
        return p
