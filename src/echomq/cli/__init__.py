"""The ``echomq`` command line (also ``python -m echomq``).

One parser, one registry: each ``*_cmd`` module declares its commands in a
``register(commands)`` function (``Commands.add`` in ``common.py``), and :data:`REGISTRARS`
lists those functions in help order. To add a command: write ``cli/<topic>_cmd.py`` with a
``register``, and add it to :data:`REGISTRARS` (docs/operations.md, "Adding a command").

``--url`` (or ``$ECHOMQ_URL``, else redis://127.0.0.1:6379/0) picks the server; job
commands take ``--queue`` (or ``$ECHOMQ_QUEUE``, else ``default``). ``echomq worker
module:queue`` tries the queue's own ``Queue(url=...)`` before that default.
Exit codes: 0 done, 1 refused (the reason on stderr; an unknown queue too), 2 usage.
``echomq --version`` (or ``echomq version``) prints ``echomq <version>``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from . import (
    archive_cmd,
    flows_cmd,
    job_cmd,
    jobs_cmd,
    lanes_cmd,
    queue_cmd,
    repeat_cmd,
    serve_cmd,
    version_cmd,
    watch_cmd,
    worker_cmd,
    workers_cmd,
)
from .common import DONE as DONE
from .common import REFUSED as REFUSED
from .common import USAGE as USAGE
from .common import Commands, Parser
from .common import UsageError as UsageError

__all__ = ["REGISTRARS", "build_parser", "main"]

#: every module that adds commands, in help order: ``register(commands) -> None``
REGISTRARS: tuple[Callable[[Commands], None], ...] = (
    queue_cmd.register,
    lanes_cmd.register,  # limits, groups (docs/lanes.md)
    jobs_cmd.register,  # jobs: the ids a state holds
    job_cmd.register,
    flows_cmd.register,  # flows: waiting parents, held roots (docs/flows.md)
    repeat_cmd.register,
    watch_cmd.register,
    worker_cmd.register,
    workers_cmd.register,
    serve_cmd.register,
    archive_cmd.register,  # archive, history (echomq.archive)
    version_cmd.register,
)


def build_parser() -> Parser:
    from ..config import DEFAULT_URL

    parser = Parser(
        prog="echomq",
        description="Operate echomq queues: status, jobs, pause/resume, drain, obliterate, "
        "repeatables, watch; run a worker, the dashboard or the demo.",
        epilog="Exit codes: 0 done, 1 refused (reason on stderr; an unknown queue too), 2 usage.",
    )
    parser.add_argument("--url", help="Redis URL (default: $ECHOMQ_URL or " + DEFAULT_URL + ")")
    parser.add_argument("--version", action="version", version=version_cmd.version_line())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    commands = Commands(sub)
    for register in REGISTRARS:
        register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; answer the exit code (the ``echomq`` script exits with it)."""
    args = build_parser().parse_args(argv)
    code: int = args.handler(args)
    return code
